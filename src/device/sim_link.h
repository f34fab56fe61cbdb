// Note [The sim link]
// The sim device's host→device "link": one transfer thread that performs the
// copies in the order they were enqueued, as a DMA engine on a transfer
// stream does. copy_to_device() enqueues and returns; a fence completes when
// every copy before it is done. With a speed of G GB/s each copy takes at
// least bytes / G (the thread sleeps out the rest of a copy that memcpy
// finished sooner), so a machine without a GPU can show how much of a
// transfer compute waits for (exposed) and how much runs beside it
// (hidden). At 0 the copies run at memcpy speed. Figures are simulated.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <torch/types.h>

namespace omni::device {

class SimLink {
 public:
  using Clock = std::chrono::steady_clock;

  // What a transfer timer accumulates: link-busy seconds of the copies
  // enqueued while it was open.
  struct TimerState {
    int pending = 0;
    bool stopped = false;
    double busy_seconds = 0;
  };

  explicit SimLink(double gbps);
  ~SimLink();  // finishes every queued copy, then joins the thread
  SimLink(const SimLink&) = delete;
  SimLink& operator=(const SimLink&) = delete;

  // Enqueues a copy; `keep` holds the destination's storage until it is done.
  // Returns the copy's sequence number (1, 2, ...).
  std::uint64_t enqueue(std::uint8_t* dst, const void* src, std::size_t bytes, torch::Tensor keep);
  // The number of the last copy enqueued.
  std::uint64_t last_enqueued();
  bool completed(std::uint64_t sequence);
  void wait(std::uint64_t sequence);

  std::shared_ptr<TimerState> open_timer();
  void close_timer(const std::shared_ptr<TimerState>& timer);
  double timer_seconds(const std::shared_ptr<TimerState>& timer);

 private:
  struct Job {
    std::uint8_t* dst;
    const void* src;
    std::size_t bytes;
    torch::Tensor keep;
    std::vector<std::shared_ptr<TimerState>> timers;
  };
  void run();

  const double gbps_;
  std::mutex mutex_;
  std::condition_variable work_;
  std::condition_variable done_;
  std::deque<Job> jobs_;
  std::vector<std::shared_ptr<TimerState>> open_timers_;
  std::uint64_t enqueued_ = 0;
  std::uint64_t completed_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace omni::device
