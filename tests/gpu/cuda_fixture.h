// The `gpu` test module: what only a real CUDA device can show (the
// allocator's own statistics, page-locked homes, the transfer stream). Every
// test compiles in every build and skips cleanly when no CUDA device is
// usable (a build without OMNI_WITH_CUDA, or no GPU visible); ctest label `gpu`.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <memory>

#include "omni/device/device.h"

namespace gpu_test {

// Skips unless a CUDA device is usable; touches nothing of CUDA itself, so
// a test using it alone starts from a process where CUDA is not initialised
// (each gtest runs in its own process under ctest).
class CudaCold : public ::testing::Test {
 protected:
  void SetUp() override {
#if OMNI_WITH_CUDA
    if (!omni::device::cuda_available())
      GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount found none: no GPU or driver)";
#else
    GTEST_SKIP() << "a build without the CUDA device (-DOMNI_WITH_CUDA=ON, scripts/build-cuda)";
#endif
  }
};

class Cuda : public CudaCold {
 protected:
  void SetUp() override {
    CudaCold::SetUp();
    if (IsSkipped()) return;
    device_ = omni::device::make_device(omni::device::DeviceSpec::parse("cuda:0"), true);
    warm_up();
  }

  // Creates what LibTorch keeps for the process on first use (cuBLAS and
  // cuBLASLt workspaces from the caching allocator, cuDNN handles), so that
  // allocator figures taken after it count weights and activations only.
  void warm_up() {
    const auto options = torch::TensorOptions().device(device_->compute_device());
    auto x = torch::randn({64, 64}, options);
    auto y = torch::mm(x, x) + torch::nn::functional::linear(x, x, x[0]);
    auto image = torch::randn({1, 4, 16, 16}, options);
    auto filters = torch::randn({8, 4, 3, 3}, options);
    y = y.sum() + torch::conv2d(image, filters, {}, 1, 1).sum();
    (void)y.item<float>();
    device_->synchronize();
  }

  std::uint64_t allocated() const {
    device_->synchronize();
    return device_->memory_stats().allocated_bytes;
  }

  torch::TensorOptions cuda() const {
    return torch::TensorOptions().device(device_->compute_device());
  }

  std::unique_ptr<omni::device::Device> device_;
};

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace gpu_test
