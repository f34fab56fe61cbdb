#include "device/cpu_device.h"

#include <cstring>

namespace omni::device {

namespace {
class WallClockTimer final : public TransferTimer {
 public:
  void stop() override { end_ = std::chrono::steady_clock::now(); }
  double seconds() override { return std::chrono::duration<double>(end_ - start_).count(); }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point end_ = start_;
};
// Copies on the cpu "device" are synchronous: every fence is passed.
class PassedFence final : public UploadFence {
 public:
  bool done() override { return true; }
  void synchronize() override {}
};

class NoWait final : public DeviceDuration {
 public:
  double seconds() override { return 0; }
};
}  // namespace

std::shared_ptr<UploadFence> CpuDevice::fence_uploads() {
  return std::make_shared<PassedFence>();
}

std::unique_ptr<DeviceDuration> CpuDevice::wait_for(const std::shared_ptr<UploadFence>&) {
  return std::make_unique<NoWait>();
}

std::unique_ptr<TransferTimer> make_wall_clock_timer() {
  return std::make_unique<WallClockTimer>();
}

torch::Tensor CpuDevice::allocate(std::size_t bytes) {
  return torch::empty({static_cast<std::int64_t>(bytes)}, torch::kUInt8);
}

void CpuDevice::copy_to_device(torch::Tensor& buffer, std::size_t offset, const void* src,
                               std::size_t bytes, bool) {
  std::memcpy(buffer.data_ptr<std::uint8_t>() + offset, src, bytes);
}

void CpuDevice::copy_to_host(void* dst, const torch::Tensor& buffer, std::size_t offset,
                             std::size_t bytes) {
  std::memcpy(dst, static_cast<const std::uint8_t*>(buffer.data_ptr()) + offset, bytes);
}

std::unique_ptr<TransferTimer> CpuDevice::start_transfer_timer() {
  return make_wall_clock_timer();
}

}  // namespace omni::device
