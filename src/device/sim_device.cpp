#include "device/sim_device.h"

#include <cstdlib>
#include <cstring>

#include "device/sim_link.h"
#include "omni/error.h"
#include "testing/fault_injection.h"

namespace omni::device {

namespace {

class SimFence final : public UploadFence {
 public:
  SimFence(std::shared_ptr<SimLink> link, std::uint64_t sequence)
      : link_(std::move(link)), sequence_(sequence) {}
  bool done() override { return link_->completed(sequence_); }
  void synchronize() override { link_->wait(sequence_); }

 private:
  std::shared_ptr<SimLink> link_;
  std::uint64_t sequence_;
};

class FixedDuration final : public DeviceDuration {
 public:
  explicit FixedDuration(double seconds) : seconds_(seconds) {}
  double seconds() override { return seconds_; }

 private:
  double seconds_;
};

class SimTimer final : public TransferTimer {
 public:
  explicit SimTimer(std::shared_ptr<SimLink> link)
      : link_(std::move(link)), state_(link_->open_timer()) {}
  ~SimTimer() override {
    if (!state_->stopped) link_->close_timer(state_);
  }
  void stop() override { link_->close_timer(state_); }
  double seconds() override {
    if (!state_->stopped) stop();
    return link_->timer_seconds(state_);
  }

 private:
  std::shared_ptr<SimLink> link_;
  std::shared_ptr<SimLink::TimerState> state_;
};

}  // namespace

SimDevice::SimDevice(const DeviceOptions& options)
    : options_(options), link_(std::make_shared<SimLink>(options.sim_link_gbps)) {
  OMNI_CHECK(options.sim_link_gbps >= 0 && options.sim_link_gbps < 1e6, ConfigError,
             "sim link speed must be 0 (memcpy speed) or a positive number of GB/s, got ",
             options.sim_link_gbps);
}

SimDevice::~SimDevice() = default;

std::shared_ptr<void> SimDevice::pin_host(void* ptr, std::size_t bytes) {
  std::lock_guard<std::mutex> lock(counters_->mutex);
  const auto budget = fault::armed_faults().pin_budget_bytes;  // Note [Fault injection]
  if (budget && counters_->pinned + bytes > *budget) return nullptr;
  counters_->pinned += bytes;
  auto counters = counters_;
  return std::shared_ptr<void>(ptr, [counters, bytes](void*) {
    std::lock_guard<std::mutex> lock(counters->mutex);
    counters->pinned -= bytes;
  });
}

torch::Tensor SimDevice::allocate(std::size_t bytes) {
  ++allocations_;
  if (const auto n = fault::armed_faults().fail_allocation_number; n && *n == allocations_)
    throw DeviceOutOfMemory(
        detail::concat("sim: out of device memory (injected fault at allocation ", allocations_,
                       " of ", format_bytes(bytes), ")"));
  {
    std::lock_guard<std::mutex> lock(counters_->mutex);
    OMNI_CHECK(counters_->allocated + bytes <= options_.sim_memory_bytes, DeviceOutOfMemory,
               "sim: out of device memory: tried to allocate ", format_bytes(bytes), " with ",
               format_bytes(counters_->allocated), " of ", format_bytes(options_.sim_memory_bytes),
               " in use (raise --sim-memory or enable offload)");
    counters_->allocated += bytes;
    counters_->peak = std::max(counters_->peak, counters_->allocated);
  }
  void* ptr = std::malloc(bytes == 0 ? 1 : bytes);
  if (ptr == nullptr) {
    std::lock_guard<std::mutex> lock(counters_->mutex);
    counters_->allocated -= bytes;
    throw DeviceOutOfMemory(detail::concat("sim: host malloc of ", format_bytes(bytes), " failed"));
  }
  auto counters = counters_;
  return torch::from_blob(
      ptr, {static_cast<std::int64_t>(bytes)},
      [counters, bytes](void* p) {
        std::free(p);
        std::lock_guard<std::mutex> lock(counters->mutex);
        counters->allocated -= bytes;
      },
      torch::TensorOptions().dtype(torch::kUInt8));
}

void SimDevice::copy_to_device(torch::Tensor& buffer, std::size_t offset, const void* src,
                               std::size_t bytes, bool) {
  OMNI_INTERNAL_ASSERT(offset + bytes <= static_cast<std::size_t>(buffer.numel()));
  ++copies_;
  if (const auto n = fault::armed_faults().fail_copy_number; n && *n == copies_)
    throw Error(
        detail::concat("sim: host-to-device copy failed (injected fault at copy ", copies_, ")"));
  link_->enqueue(buffer.data_ptr<std::uint8_t>() + offset, src, bytes, buffer);
}

std::shared_ptr<UploadFence> SimDevice::fence_uploads() {
  return std::make_shared<SimFence>(link_, link_->last_enqueued());
}

std::unique_ptr<DeviceDuration> SimDevice::wait_for(const std::shared_ptr<UploadFence>& fence) {
  // Sim computes on the calling thread: blocking it is exactly compute waiting.
  const auto start = std::chrono::steady_clock::now();
  if (!fence->done()) fence->synchronize();
  return std::make_unique<FixedDuration>(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

void SimDevice::synchronize() {
  link_->wait(link_->last_enqueued());
}

void SimDevice::copy_to_host(void* dst, const torch::Tensor& buffer, std::size_t offset,
                             std::size_t bytes) {
  OMNI_INTERNAL_ASSERT(offset + bytes <= static_cast<std::size_t>(buffer.numel()));
  synchronize();  // ordered after every upload, as on a stream
  std::memcpy(dst, static_cast<const std::uint8_t*>(buffer.data_ptr()) + offset, bytes);
}

std::unique_ptr<TransferTimer> SimDevice::start_transfer_timer() {
  return std::make_unique<SimTimer>(link_);
}

torch::Tensor SimDevice::offloaded_view(const torch::Tensor& home) {
  return make_unusable_placeholder(home);
}

MemoryStats SimDevice::memory_stats() const {
  std::lock_guard<std::mutex> lock(counters_->mutex);
  MemoryStats stats{counters_->allocated, counters_->peak, options_.sim_memory_bytes};
  stats.reserved_bytes = counters_->allocated;  // frees are immediate: nothing is cached
  return stats;
}

void SimDevice::reset_peak() {
  std::lock_guard<std::mutex> lock(counters_->mutex);
  counters_->peak = counters_->allocated;
}

}  // namespace omni::device
