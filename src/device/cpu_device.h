// The cpu "device": no accelerator, so nothing is ever offloaded.
#pragma once

#include "device/copy_back.h"
#include "omni/device/device.h"

namespace omni::device {

class CpuDevice final : public Device, public CopyBack {
 public:
  DeviceKind kind() const override { return DeviceKind::cpu; }
  std::string name() const override { return "cpu"; }
  torch::Device compute_device() const override { return torch::kCPU; }
  bool supports_offload() const override { return false; }
  std::shared_ptr<void> pin_host(void*, std::size_t) override { return nullptr; }
  torch::Tensor allocate(std::size_t bytes) override;
  void copy_to_device(torch::Tensor& buffer, std::size_t offset, const void* src, std::size_t bytes,
                      bool) override;
  std::shared_ptr<UploadFence> fence_uploads() override;
  std::unique_ptr<DeviceDuration> wait_for(const std::shared_ptr<UploadFence>& fence) override;
  void copy_to_host(void* dst, const torch::Tensor& buffer, std::size_t offset,
                    std::size_t bytes) override;
  void release_cached_memory() override {}
  std::unique_ptr<TransferTimer> start_transfer_timer() override;
  void retire(torch::Tensor&) override {}
  torch::Tensor offloaded_view(const torch::Tensor& home) override { return home; }
  void synchronize() override {}
  MemoryStats memory_stats() const override { return {}; }
  void reset_peak() override {}
};

}  // namespace omni::device
