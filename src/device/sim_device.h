// The sim device: a host-backed stand-in accelerator (design.md §3).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>

#include "device/copy_back.h"
#include "omni/device/device.h"

namespace omni::device {

class SimLink;

class SimDevice final : public Device, public CopyBack {
 public:
  explicit SimDevice(const DeviceOptions& options);
  ~SimDevice() override;
  DeviceKind kind() const override { return DeviceKind::sim; }
  std::string name() const override { return "sim"; }
  torch::Device compute_device() const override { return torch::kCPU; }
  bool is_stand_in() const override { return true; }
  std::shared_ptr<void> pin_host(void* ptr, std::size_t bytes) override;
  torch::Tensor allocate(std::size_t bytes) override;
  void copy_to_device(torch::Tensor& buffer, std::size_t offset, const void* src, std::size_t bytes,
                      bool src_pinned) override;
  std::shared_ptr<UploadFence> fence_uploads() override;
  std::unique_ptr<DeviceDuration> wait_for(const std::shared_ptr<UploadFence>& fence) override;
  void copy_to_host(void* dst, const torch::Tensor& buffer, std::size_t offset,
                    std::size_t bytes) override;
  void release_cached_memory() override {}
  std::unique_ptr<TransferTimer> start_transfer_timer() override;
  void retire(torch::Tensor&) override {}
  torch::Tensor offloaded_view(const torch::Tensor& home) override;
  void synchronize() override;
  MemoryStats memory_stats() const override;
  void reset_peak() override;

 private:
  struct Counters {
    std::mutex mutex;
    std::uint64_t allocated = 0;
    std::uint64_t peak = 0;
    std::uint64_t pinned = 0;
  };
  DeviceOptions options_;
  std::shared_ptr<Counters> counters_ = std::make_shared<Counters>();
  std::shared_ptr<SimLink> link_;
  int allocations_ = 0;
  int copies_ = 0;
};

}  // namespace omni::device
