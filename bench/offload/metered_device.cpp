#include "bench/offload/metered_device.h"

#include <algorithm>

#include "omni/error.h"

namespace omni::bench {

MeteredDevice::MeteredDevice(device::Device& inner, bool cache_allocations)
    : inner_(inner), cache_(cache_allocations) {}

torch::Tensor MeteredDevice::take_cached(std::size_t bytes) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  auto it = state_->cached.find(bytes);
  if (it == state_->cached.end()) return {};
  auto buffer = std::move(it->second);
  state_->cached.erase(it);
  return buffer;
}

torch::Tensor MeteredDevice::allocate(std::size_t bytes) {
  if (!cache_) return inner_.allocate(bytes);
  auto buffer = take_cached(bytes);
  if (!buffer.defined()) {
    try {
      buffer = inner_.allocate(bytes);
    } catch (const DeviceOutOfMemory&) {
      release_cached_memory();  // what the CUDA allocator does before giving up
      buffer = inner_.allocate(bytes);
    }
  }
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->in_use += bytes;
    state_->peak_in_use = std::max(state_->peak_in_use, state_->in_use);
  }
  auto state = state_;
  void* data = buffer.data_ptr();
  const auto options = buffer.options();
  // The caller's tensor aliases the cached buffer; when it dies the buffer
  // goes back to the cache.
  return torch::from_blob(
      data, {static_cast<std::int64_t>(bytes)},
      [state, buffer, bytes](void*) mutable {
        std::lock_guard<std::mutex> lock(state->mutex);
        state->in_use -= bytes;
        state->cached.emplace(bytes, std::move(buffer));
      },
      options);
}

void MeteredDevice::release_cached_memory() {
  std::multimap<std::size_t, torch::Tensor> dropped;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    dropped.swap(state_->cached);
  }
  dropped.clear();  // outside the lock: freeing may take a while
  device::copy_back(inner_).release_cached_memory();
}

device::MemoryStats MeteredDevice::memory_stats() const {
  auto stats = inner_.memory_stats();
  if (!cache_) return stats;
  std::lock_guard<std::mutex> lock(state_->mutex);
  stats.reserved_bytes = stats.allocated_bytes;  // the inner device's: in use and cached
  stats.allocated_bytes = state_->in_use;
  stats.peak_allocated_bytes = state_->peak_in_use;
  return stats;
}

void MeteredDevice::reset_peak() {
  inner_.reset_peak();
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->peak_in_use = state_->in_use;
}

MeterReadings MeteredDevice::readings() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->readings;
}

void MeteredDevice::reset_pinned_peak() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->readings.pinned_peak_bytes = state_->readings.pinned_bytes;
}

std::shared_ptr<void> MeteredDevice::pin_host(void* ptr, std::size_t bytes) {
  auto inner = inner_.pin_host(ptr, bytes);
  std::lock_guard<std::mutex> lock(state_->mutex);
  auto& r = state_->readings;
  if (!inner) {
    ++r.pin_refusals;
    return nullptr;
  }
  r.pinned_bytes += bytes;
  r.pinned_peak_bytes = std::max(r.pinned_peak_bytes, r.pinned_bytes);
  auto state = state_;
  // Our handle owns the inner one: when it goes, the memory is unpinned and uncounted.
  return std::shared_ptr<void>(ptr, [state, inner, bytes](void*) mutable {
    inner.reset();
    std::lock_guard<std::mutex> lock(state->mutex);
    state->readings.pinned_bytes -= bytes;
  });
}

void MeteredDevice::copy_to_device(torch::Tensor& buffer, std::size_t offset, const void* src,
                                   std::size_t bytes, bool src_pinned) {
  inner_.copy_to_device(buffer, offset, src, bytes, src_pinned);
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->readings.h2d_bytes += bytes;
  state_->readings.h2d_copies += 1;
}

void MeteredDevice::copy_to_host(void* dst, const torch::Tensor& buffer, std::size_t offset,
                                 std::size_t bytes) {
  device::copy_back(inner_).copy_to_host(dst, buffer, offset, bytes);
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->readings.d2h_bytes += bytes;
  state_->readings.d2h_copies += 1;
}

}  // namespace omni::bench
