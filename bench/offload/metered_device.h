// A Device that forwards to another and counts what passes through it: bytes
// host→device and device→host, and page-locked host memory (now and at its
// peak). Every strategy of `omni bench offload` runs on one, so their figures
// come from the same meter rather than from each strategy's own report.
//
// Note [Caching device allocations on sim]
// A real device allocates weights through a caching allocator (CUDA's keeps
// freed blocks and hands them out again until empty_cache()). The sim device
// mallocs every buffer, and fresh host pages fault on first touch, so without
// help a sim "upload" would mostly measure page faults. With
// `cache_allocations` the meter keeps freed buffers by size and reuses them,
// and release_cached_memory() drops them, as empty_cache() does; memory_stats()
// then reports the bytes in use (not the cached ones), like the CUDA
// allocator's allocated_bytes.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "device/copy_back.h"
#include "omni/device/device.h"

namespace omni::bench {

struct MeterReadings {
  std::uint64_t h2d_bytes = 0;  // cumulative
  std::uint64_t d2h_bytes = 0;  // cumulative
  std::uint64_t h2d_copies = 0;
  std::uint64_t d2h_copies = 0;
  std::uint64_t pinned_bytes = 0;  // page-locked through pin_host, held now
  std::uint64_t pinned_peak_bytes = 0;
  std::uint64_t pin_refusals = 0;
};

class MeteredDevice final : public device::Device, public device::CopyBack {
 public:
  // `inner` must outlive this object. See Note [Caching device allocations on sim].
  MeteredDevice(device::Device& inner, bool cache_allocations);

  MeterReadings readings() const;
  // Starts a new pinned peak at the current pinned bytes.
  void reset_pinned_peak();

  device::DeviceKind kind() const override { return inner_.kind(); }
  std::string name() const override { return inner_.name(); }
  torch::Device compute_device() const override { return inner_.compute_device(); }
  bool is_stand_in() const override { return inner_.is_stand_in(); }
  bool supports_offload() const override { return inner_.supports_offload(); }
  std::shared_ptr<void> pin_host(void* ptr, std::size_t bytes) override;
  torch::Tensor allocate(std::size_t bytes) override;
  void copy_to_device(torch::Tensor& buffer, std::size_t offset, const void* src, std::size_t bytes,
                      bool src_pinned) override;
  void copy_to_host(void* dst, const torch::Tensor& buffer, std::size_t offset,
                    std::size_t bytes) override;
  void release_cached_memory() override;
  std::unique_ptr<device::TransferTimer> start_transfer_timer() override {
    return inner_.start_transfer_timer();
  }
  std::shared_ptr<device::UploadFence> fence_uploads() override { return inner_.fence_uploads(); }
  std::unique_ptr<device::DeviceDuration> wait_for(
      const std::shared_ptr<device::UploadFence>& fence) override {
    return inner_.wait_for(fence);
  }
  void retire(torch::Tensor& buffer) override { inner_.retire(buffer); }
  torch::Tensor offloaded_view(const torch::Tensor& home) override {
    return inner_.offloaded_view(home);
  }
  void synchronize() override { inner_.synchronize(); }
  device::MemoryStats memory_stats() const override;
  void reset_peak() override;

 private:
  struct State {
    std::mutex mutex;
    MeterReadings readings;
    std::multimap<std::size_t, torch::Tensor> cached;  // free device buffers by size
    std::uint64_t in_use = 0, peak_in_use = 0;
  };
  torch::Tensor take_cached(std::size_t bytes);
  device::Device& inner_;
  bool cache_ = false;
  // Shared with the pin handles, which may outlive this object.
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

}  // namespace omni::bench
