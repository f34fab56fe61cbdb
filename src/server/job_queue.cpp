#include "omni/server/job_queue.h"

#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <iostream>

#include "omni/cancel_point.h"

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

JobQueue::JobQueue(EngineFactory factory, std::size_t capacity, Observer on_loaded,
                   BatchOptions batching)
    : capacity_(capacity), batching_(batching) {
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
      auto jobs = take_jobs();
      if (jobs.empty()) break;  // stopping and drained
      run_jobs(*engine, jobs);
      std::lock_guard lock(mutex_);
      running_.clear();
      if (queue_.empty()) idle_.notify_all();
    }
  }
  engine.reset();
}

std::vector<Job> JobQueue::take_jobs() {
  std::unique_lock lock(mutex_);
  wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
  if (queue_.empty()) return {};
  std::vector<Job> jobs;
  const auto take = [&](std::deque<Job>::iterator it) {
    running_.push_back({it->id, it->cancellation});
    jobs.push_back(std::move(*it));
    return queue_.erase(it);
  };
  take(queue_.begin());
  if (!jobs.front().batch || jobs.front().batch->key.empty() || batching_.max_batch < 2)
    return jobs;
  const std::string key = jobs.front().batch->key;
  const auto join = [&] {
    for (auto it = queue_.begin(); it != queue_.end() && jobs.size() < batching_.max_batch;) {
      if (it->batch && it->batch->key == key && !it->cancellation->cancelled())
        it = take(it);
      else
        ++it;
    }
  };
  join();
  const auto deadline = std::chrono::steady_clock::now() + batching_.wait;
  while (jobs.size() < batching_.max_batch && !stopping_ &&
         wake_.wait_until(lock, deadline) == std::cv_status::no_timeout)
    join();  // a job arrived (or a spurious wake-up)
  join();
  return jobs;
}

void JobQueue::run_jobs(Omni& engine, std::vector<Job>& jobs) {
  std::vector<Job*> live;
  for (auto& job : jobs) {
    if (job.cancellation->cancelled())
      drop(job, describe(job.cancellation->reason()));  // while queued or waiting for its batch
    else
      live.push_back(&job);
  }
  if (live.empty()) return;
  std::vector<pipelines::GenerationRequest> next;
  {
    std::lock_guard lock(mutex_);
    for (const auto& queued : queue_) {
      if (!queued.batch || queued.cancellation->cancelled()) continue;
      next.push_back(queued.batch->request);
      break;
    }
  }
  // Note [Cancel points inside a step]: the run stops at the next cancel
  // point once every job in it is cancelled (one cancelled job of a batch
  // rides along until the others finish or are cancelled too).
  const ScopedCancelCheck check([&live] {
    for (const auto* job : live)
      if (!job->cancellation->cancelled()) return;
    live.front()->cancellation->throw_if_cancelled();
  });
  try {
    engine.set_lookahead(std::move(next));
    if (!live.front()->batch) {
      live.front()->run(engine);
      return;
    }
    std::vector<pipelines::GenerationRequest> requests;
    std::vector<pipelines::ProgressFn> progress;
    for (const auto* job : live) {
      if (job->batch->start) job->batch->start();
      requests.push_back(job->batch->request);
      progress.push_back(job->batch->progress);
    }
    auto outcomes = engine.generate_batch(requests, progress);
    for (std::size_t i = 0; i < live.size(); ++i) {
      try {
        live[i]->batch->finish(engine, std::move(outcomes[i]));
      } catch (const std::exception& e) {
        log_escaped("a job escaped with an error", e.what());
      }
    }
  } catch (const std::exception& e) {
    log_escaped("a job escaped with an error", e.what());
  } catch (...) {
    log_escaped("a job escaped with an error", "unknown exception");
  }
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
    const auto running = std::find_if(running_.begin(), running_.end(),
                                      [&](const Running& r) { return r.id == id; });
    if (running != running_.end()) {
      running->cancellation->cancel(reason);
      return true;
    }
    auto it = std::find_if(queue_.begin(), queue_.end(), [&](const Job& j) { return j.id == id; });
    if (it == queue_.end()) return false;
    cancelled = std::move(*it);
    queue_.erase(it);
    if (queue_.empty() && running_.empty()) idle_.notify_all();
  }
  cancelled.cancellation->cancel(reason);
  drop(cancelled, describe(reason));
  return true;
}

QueueStats JobQueue::stats() const {
  std::lock_guard lock(mutex_);
  return {queue_.size(), capacity_, !running_.empty(), running_.size(), stopping_};
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
    for (auto& r : running_) r.cancellation->cancel(reason);
    wake_.notify_all();
    if (running_.empty()) idle_.notify_all();
  }
  for (auto& job : dropped) {
    job.cancellation->cancel(reason);
    drop(job, describe(reason));
  }
}

bool JobQueue::wait_idle(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  return idle_.wait_for(lock, timeout, [&] { return queue_.empty() && running_.empty(); });
}

void JobQueue::shutdown() {
  close();
  std::lock_guard join_lock(join_mutex_);
  if (worker_.joinable()) worker_.join();
}

}  // namespace omni::server
