#include "device/sim_link.h"

#include <cstring>

namespace omni::device {

SimLink::SimLink(double gbps) : gbps_(gbps), thread_([this] { run(); }) {}

SimLink::~SimLink() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_.notify_all();
  thread_.join();
}

std::uint64_t SimLink::enqueue(std::uint8_t* dst, const void* src, std::size_t bytes,
                               torch::Tensor keep) {
  std::uint64_t sequence = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& t : open_timers_) ++t->pending;
    jobs_.push_back({dst, src, bytes, std::move(keep), open_timers_});
    sequence = ++enqueued_;
  }
  work_.notify_one();
  return sequence;
}

std::uint64_t SimLink::last_enqueued() {
  std::lock_guard<std::mutex> lock(mutex_);
  return enqueued_;
}

bool SimLink::completed(std::uint64_t sequence) {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_ >= sequence;
}

void SimLink::wait(std::uint64_t sequence) {
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [&] { return completed_ >= sequence; });
}

std::shared_ptr<SimLink::TimerState> SimLink::open_timer() {
  auto timer = std::make_shared<TimerState>();
  std::lock_guard<std::mutex> lock(mutex_);
  open_timers_.push_back(timer);
  return timer;
}

void SimLink::close_timer(const std::shared_ptr<TimerState>& timer) {
  std::lock_guard<std::mutex> lock(mutex_);
  timer->stopped = true;
  std::erase(open_timers_, timer);
}

double SimLink::timer_seconds(const std::shared_ptr<TimerState>& timer) {
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [&] { return timer->pending == 0; });
  return timer->busy_seconds;
}

void SimLink::run() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping, and nothing left to copy
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    const auto start = Clock::now();
    if (job.bytes) std::memcpy(job.dst, job.src, job.bytes);
    if (gbps_ > 0)
      std::this_thread::sleep_until(
          start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
                      static_cast<double>(job.bytes) / (gbps_ * 1e9))));
    const double busy = std::chrono::duration<double>(Clock::now() - start).count();
    job.keep = torch::Tensor();  // the destination may be freed from here on
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto& t : job.timers) {
        t->busy_seconds += busy;
        --t->pending;
      }
      ++completed_;
    }
    done_.notify_all();
  }
}

}  // namespace omni::device
