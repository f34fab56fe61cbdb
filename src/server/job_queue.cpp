#include "omni/server/job_queue.h"

#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <iostream>

namespace omni::server {

namespace {
void log_escaped(const char* what, const std::string& message) {
  std::cerr << "omni serve: " << what << ": " << message.substr(0, message.find('\n')) << "\n";
}
// Runs a job's drop callback; it must not take the caller (a destructor, say) down.
void drop(Job& job, std::string_view reason) noexcept {
  try {
    if (job.drop) job.drop(reason);
  } catch (const std::exception& e) {
    log_escaped("dropping a job failed", e.what());
  } catch (...) {
    log_escaped("dropping a job failed", "unknown exception");
  }
}
}  // namespace

JobQueue::JobQueue(EngineFactory factory, std::size_t capacity, Observer on_loaded)
    : capacity_(capacity) {
  std::promise<void> loaded;
  auto ready = loaded.get_future();
  worker_ = std::thread(
      [this, f = std::move(factory), o = std::move(on_loaded), p = std::move(loaded)]() mutable {
        worker_main(std::move(f), std::move(o), std::move(p));
      });
  try {
    ready.get();
  } catch (...) {
    worker_.join();
    throw;
  }
}

JobQueue::~JobQueue() {
  shutdown();
}

void JobQueue::worker_main(EngineFactory factory, Observer on_loaded, std::promise<void> loaded) {
  std::unique_ptr<Omni> engine;
  try {
    engine = factory();
    if (on_loaded) on_loaded(*engine);
  } catch (...) {
    loaded.set_exception(std::current_exception());
    return;
  }
  loaded.set_value();
  {
    // Weights are immutable at inference: no autograd bookkeeping on this
    // thread (Note [One engine thread]). Created after loading so that the
    // parameters themselves stay ordinary tensors.
    c10::InferenceMode inference_mode;
    for (;;) {
      Job job;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) break;  // stopping and drained
        job = std::move(queue_.front());
        queue_.pop_front();
        running_ = true;
        running_id_ = job.id;
        running_cancellation_ = job.cancellation;
      }
      if (job.cancellation->cancelled()) {
        drop(job, describe(job.cancellation->reason()));
      } else {
        try {
          job.run(*engine);
        } catch (const std::exception& e) {
          log_escaped("a job escaped with an error", e.what());
        } catch (...) {
          log_escaped("a job escaped with an error", "unknown exception");
        }
      }
      std::lock_guard lock(mutex_);
      running_ = false;
      running_id_.clear();
      running_cancellation_.reset();
      if (queue_.empty()) idle_.notify_all();
    }
  }
  engine.reset();
}

SubmitResult JobQueue::submit(Job job) {
  std::lock_guard lock(mutex_);
  if (stopping_) return SubmitResult::stopped;
  if (queue_.size() >= capacity_) return SubmitResult::full;
  queue_.push_back(std::move(job));
  wake_.notify_one();
  return SubmitResult::accepted;
}

bool JobQueue::cancel(const std::string& id, CancelReason reason) {
  if (id.empty()) return false;
  Job cancelled;
  {
    std::lock_guard lock(mutex_);
    if (running_ && running_id_ == id) {
      running_cancellation_->cancel(reason);
      return true;
    }
    auto it = std::find_if(queue_.begin(), queue_.end(), [&](const Job& j) { return j.id == id; });
    if (it == queue_.end()) return false;
    cancelled = std::move(*it);
    queue_.erase(it);
    if (queue_.empty() && !running_) idle_.notify_all();
  }
  cancelled.cancellation->cancel(reason);
  drop(cancelled, describe(reason));
  return true;
}

QueueStats JobQueue::stats() const {
  std::lock_guard lock(mutex_);
  return {queue_.size(), capacity_, running_, stopping_};
}

void JobQueue::close() {
  std::lock_guard lock(mutex_);
  stopping_ = true;
  wake_.notify_all();
}

void JobQueue::abort(CancelReason reason) {
  std::deque<Job> dropped;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    dropped.swap(queue_);
    if (running_) running_cancellation_->cancel(reason);
    wake_.notify_all();
    if (!running_) idle_.notify_all();
  }
  for (auto& job : dropped) {
    job.cancellation->cancel(reason);
    drop(job, describe(reason));
  }
}

bool JobQueue::wait_idle(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  return idle_.wait_for(lock, timeout, [&] { return queue_.empty() && !running_; });
}

void JobQueue::shutdown() {
  close();
  std::lock_guard join_lock(join_mutex_);
  if (worker_.joinable()) worker_.join();
}

}  // namespace omni::server
