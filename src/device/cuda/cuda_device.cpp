// Note [Uploads on the transfer stream]
// Weights go host→device with cudaMemcpyAsync on a dedicated transfer stream,
// straight from page-locked home memory (cudaHostRegister'd in chunks). When
// a component's copies are enqueued, an event is recorded on the transfer
// stream and the compute stream waits on it: the host never blocks. Buffers
// are allocated by the caching allocator on the transfer stream and used on
// the compute stream, so retire() records the compute stream on them before
// they are dropped; the allocator then will not reuse the memory until the
// compute that read it has finished (design.md §2 rule 4).
#include "device/cuda/cuda_device.h"

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <torch/types.h>

#include "omni/error.h"

namespace omni::device::cuda {

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

namespace {

void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  (void)cudaGetLastError();
  if (status == cudaErrorMemoryAllocation)
    throw DeviceOutOfMemory(detail::concat("cuda: ", what, ": ", cudaGetErrorString(status)));
  throw Error(detail::concat("cuda: ", what, ": ", cudaGetErrorString(status)));
}

class CudaTimer final : public TransferTimer {
 public:
  explicit CudaTimer(c10::cuda::CUDAStream stream) : stream_(stream) { start_.record(stream_); }
  void stop() override { end_.record(stream_); }
  double seconds() override {
    end_.synchronize();
    return start_.elapsed_time(end_) / 1000.0;
  }

 private:
  c10::cuda::CUDAStream stream_;
  at::cuda::CUDAEvent start_{cudaEventDefault};
  at::cuda::CUDAEvent end_{cudaEventDefault};
};

class CudaDevice final : public Device {
 public:
  CudaDevice(int index, const DeviceOptions& options)
      : index_(index),
        options_(options),
        transfer_(c10::cuda::getStreamFromPool(/*isHighPriority=*/false,
                                               static_cast<c10::DeviceIndex>(index))) {}

  DeviceKind kind() const override { return DeviceKind::cuda; }
  std::string name() const override { return "cuda:" + std::to_string(index_); }
  torch::Device compute_device() const override {
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index_));
  }

  std::shared_ptr<void> pin_host(void* ptr, std::size_t bytes) override {
    const auto& budget = options_.faults.pin_budget_bytes;
    if (budget && pinned_bytes_ + bytes > *budget) return nullptr;
    const auto status = cudaHostRegister(ptr, bytes, cudaHostRegisterDefault);
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      return nullptr;
    }
    pinned_bytes_ += bytes;
    return std::shared_ptr<void>(ptr, [](void* p) {
      if (cudaHostUnregister(p) != cudaSuccess) (void)cudaGetLastError();
    });
  }

  torch::Tensor allocate(std::size_t bytes) override {
    ++allocations_;
    if (options_.faults.fail_allocation_number &&
        *options_.faults.fail_allocation_number == allocations_)
      throw DeviceOutOfMemory(detail::concat("cuda: injected fault at allocation ", allocations_));
    c10::cuda::CUDAStreamGuard guard(transfer_);
    try {
      return torch::empty({static_cast<std::int64_t>(bytes)},
                          torch::TensorOptions().dtype(torch::kUInt8).device(compute_device()));
    } catch (const c10::Error& e) {
      const std::string what = e.what();
      if (what.find("out of memory") != std::string::npos)
        throw DeviceOutOfMemory(detail::concat("cuda: out of device memory allocating ",
                                               format_bytes(bytes), " for weights on ", name(),
                                               ": ", what.substr(0, what.find('\n'))));
      throw;
    }
  }

  void copy_to_device(torch::Tensor& buffer, std::size_t offset, const void* src, std::size_t bytes,
                      bool src_pinned) override {
    auto* dst = static_cast<std::uint8_t*>(buffer.data_ptr()) + offset;
    // From pinned memory the copy is truly asynchronous; from pageable memory
    // the driver stages it and returns once the source may be reused. Either
    // way it is ordered on the transfer stream.
    (void)src_pinned;
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, transfer_.stream()),
          "host-to-device copy");
  }

  void copy_to_host(void* dst, const torch::Tensor& buffer, std::size_t offset,
                    std::size_t bytes) override {
    const auto* src = static_cast<const std::uint8_t*>(buffer.data_ptr()) + offset;
    // Whatever compute enqueued before this call happens first.
    at::cuda::CUDAEvent ready;
    ready.record(c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(index_)));
    ready.block(transfer_);
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, transfer_.stream()),
          "device-to-host copy");
    check(cudaStreamSynchronize(transfer_.stream()), "device-to-host copy");
  }

  void release_cached_memory() override { c10::cuda::CUDACachingAllocator::emptyCache(); }

  std::unique_ptr<TransferTimer> start_transfer_timer() override {
    return std::make_unique<CudaTimer>(transfer_);
  }

  void publish_uploads() override {
    at::cuda::CUDAEvent ready;
    ready.record(transfer_);
    ready.block(c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(index_)));
  }

  void retire(torch::Tensor& buffer) override {
    if (!buffer.defined()) return;
    c10::cuda::CUDACachingAllocator::recordStream(
        buffer.storage().data_ptr(),
        c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(index_)));
  }

  torch::Tensor offloaded_view(const torch::Tensor& home) override { return home; }

  void synchronize() override { check(cudaDeviceSynchronize(), "synchronize"); }

  MemoryStats memory_stats() const override {
    const auto stats =
        c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(index_));
    const auto& all = stats.allocated_bytes[static_cast<std::size_t>(
        c10::cuda::CUDACachingAllocator::StatType::AGGREGATE)];
    std::size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) (void)cudaGetLastError();
    return {static_cast<std::uint64_t>(all.current), static_cast<std::uint64_t>(all.peak),
            static_cast<std::uint64_t>(total_bytes)};
  }

  void reset_peak() override {
    c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(index_));
  }

 private:
  int index_;
  DeviceOptions options_;
  c10::cuda::CUDAStream transfer_;
  int allocations_ = 0;
  std::uint64_t pinned_bytes_ = 0;
};

}  // namespace

std::unique_ptr<Device> make_cuda_device(int index, const DeviceOptions& options) {
  const int n = cuda_device_count();
  OMNI_CHECK(index >= 0 && index < n, ConfigError, "device cuda:", index, " does not exist (", n,
             " CUDA device(s) visible)");
  return std::make_unique<CudaDevice>(index, options);
}

}  // namespace omni::device::cuda
