// Note [Uploads on the transfer stream]
// Weights go host→device with cudaMemcpyAsync on a dedicated transfer stream,
// straight from page-locked home memory (cudaHostRegister'd in chunks,
// portable to every device). Weight buffers come from the caching allocator
// on the compute stream, so memory an expert frees can hold activations and
// the reverse (a transfer-stream pool would keep the two apart). Since the
// compute stream may still be using the memory it just handed out (a block
// freed by queued kernels), the transfer stream first waits on an event
// recorded on the compute stream at allocation. The buffer is not marked
// as used by the transfer stream (record_stream): compute waits for its
// copies before any use (wait_for), so a free after that use is ordered
// after the copy on the compute stream, and a buffer released before compute
// waited is kept by the offload::Mover until its fence is done. The mark
// would only hold freed memory back until the transfer stream passed the
// free (H2 of the GPU review). Compute waits for a copy through an event
// recorded on the transfer stream (wait_for): the host never blocks.
//
// Note [CUDA initialised at construction]
// The caching allocator's statistics (getDeviceStats, resetPeakStats) fail
// with "did you call init?" until CUDA is initialised in the process, which
// happens lazily at the first CUDA tensor. The device creates an empty one
// when constructed, so that working out the budget before anything is
// uploaded works (B1 of the GPU review). LibTorch's own lazy-init function
// is not named: 2.5 renamed it. How long compute waited is the
// gap between an event recorded on the compute stream just before the wait
// and the copy's own event, clamped at zero: the exposed transfer.
#include "device/cuda/cuda_device.h"

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <torch/types.h>

#include <algorithm>
#include <atomic>

#include "device/copy_back.h"
#include "omni/error.h"
#include "testing/fault_injection.h"

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

at::cuda::CUDAEvent timing_event() {
  return at::cuda::CUDAEvent(cudaEventDefault);  // the default event disables timing
}

class CudaFence final : public UploadFence {
 public:
  CudaFence(c10::cuda::CUDAStream transfer) : event_(timing_event()) { event_.record(transfer); }
  bool done() override { return event_.query(); }
  void synchronize() override { event_.synchronize(); }
  at::cuda::CUDAEvent& event() { return event_; }

 private:
  at::cuda::CUDAEvent event_;
};

// Compute reached the wait at `reached_`; the copies were done at the fence's
// event. Exposed: how much later the second came, never negative.
class CudaWait final : public DeviceDuration {
 public:
  CudaWait(std::shared_ptr<at::cuda::CUDAEvent> reached, std::shared_ptr<CudaFence> copied)
      : reached_(std::move(reached)), copied_(std::move(copied)) {}
  double seconds() override {
    copied_->synchronize();
    reached_->synchronize();
    return std::max(0.0, static_cast<double>(reached_->elapsed_time(copied_->event())) / 1000.0);
  }

 private:
  std::shared_ptr<at::cuda::CUDAEvent> reached_;
  std::shared_ptr<CudaFence> copied_;
};

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
  at::cuda::CUDAEvent start_ = timing_event();
  at::cuda::CUDAEvent end_ = timing_event();
};

class CudaDevice final : public Device, public CopyBack {
 public:
  CudaDevice(int index, const DeviceOptions& options)
      : index_(index),
        options_(options),
        transfer_(c10::cuda::getStreamFromPool(/*isHighPriority=*/false,
                                               static_cast<c10::DeviceIndex>(index))) {
    // Note [CUDA initialised at construction].
    c10::cuda::CUDAGuard guard(device_index());
    (void)torch::empty({0}, torch::TensorOptions().dtype(torch::kUInt8).device(compute_device()));
  }

  DeviceKind kind() const override { return DeviceKind::cuda; }
  std::string name() const override { return "cuda:" + std::to_string(index_); }
  torch::Device compute_device() const override {
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index_));
  }

  std::shared_ptr<void> pin_host(void* ptr, std::size_t bytes) override {
    const auto budget = fault::armed_faults().pin_budget_bytes;  // Note [Fault injection]
    if (budget && *pinned_bytes_ + bytes > *budget) return nullptr;
    c10::cuda::CUDAGuard guard(device_index());
    // Portable: page-locked for every device's copies, not only this one's.
    const auto status = cudaHostRegister(ptr, bytes, cudaHostRegisterPortable);
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      return nullptr;
    }
    *pinned_bytes_ += bytes;
    return std::shared_ptr<void>(ptr, [pinned = pinned_bytes_, bytes](void* p) {
      if (cudaHostUnregister(p) != cudaSuccess) (void)cudaGetLastError();
      *pinned -= bytes;
    });
  }

  torch::Tensor allocate(std::size_t bytes) override {
    ++allocations_;
    if (const auto n = fault::armed_faults().fail_allocation_number; n && *n == allocations_)
      throw DeviceOutOfMemory(detail::concat("cuda: injected fault at allocation ", allocations_));
    c10::cuda::CUDAGuard guard(device_index());
    try {
      // On the compute stream's pool (Note [Uploads on the transfer stream]).
      auto buffer =
          torch::empty({static_cast<std::int64_t>(bytes)},
                       torch::TensorOptions().dtype(torch::kUInt8).device(compute_device()));
      at::cuda::CUDAEvent handed_out;
      handed_out.record(compute_stream());
      handed_out.block(transfer_);
      return buffer;
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
    ++copies_;
    if (const auto n = fault::armed_faults().fail_copy_number; n && *n == copies_)
      throw Error(detail::concat("cuda: injected fault at host-to-device copy ", copies_));
    c10::cuda::CUDAGuard guard(device_index());
    auto* dst = static_cast<std::uint8_t*>(buffer.data_ptr()) + offset;
    // From pinned memory the copy is truly asynchronous; from pageable memory
    // the driver stages it and returns once the source may be reused. Either
    // way it is ordered on the transfer stream.
    (void)src_pinned;
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, transfer_.stream()),
          "host-to-device copy");  // no record_stream (Note [Uploads on the transfer stream])
  }

  std::shared_ptr<UploadFence> fence_uploads() override {
    c10::cuda::CUDAGuard guard(device_index());
    return std::make_shared<CudaFence>(transfer_);
  }

  std::unique_ptr<DeviceDuration> wait_for(const std::shared_ptr<UploadFence>& fence) override {
    c10::cuda::CUDAGuard guard(device_index());
    auto copied = std::static_pointer_cast<CudaFence>(fence);
    auto reached = std::make_shared<at::cuda::CUDAEvent>(timing_event());
    reached->record(compute_stream());
    copied->event().block(compute_stream());
    return std::make_unique<CudaWait>(std::move(reached), std::move(copied));
  }

  void copy_to_host(void* dst, const torch::Tensor& buffer, std::size_t offset,
                    std::size_t bytes) override {
    c10::cuda::CUDAGuard guard(device_index());
    const auto* src = static_cast<const std::uint8_t*>(buffer.data_ptr()) + offset;
    // Whatever compute enqueued before this call happens first.
    at::cuda::CUDAEvent ready;
    ready.record(compute_stream());
    ready.block(transfer_);
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, transfer_.stream()),
          "device-to-host copy");
    check(cudaStreamSynchronize(transfer_.stream()), "device-to-host copy");
  }

  void release_cached_memory() override { c10::cuda::CUDACachingAllocator::emptyCache(); }

  std::unique_ptr<TransferTimer> start_transfer_timer() override {
    c10::cuda::CUDAGuard guard(device_index());
    return std::make_unique<CudaTimer>(transfer_);
  }

  void retire(torch::Tensor& buffer) override {
    if (!buffer.defined()) return;
    c10::cuda::CUDAGuard guard(device_index());
    c10::cuda::CUDACachingAllocator::recordStream(buffer.storage().data_ptr(), compute_stream());
  }

  torch::Tensor offloaded_view(const torch::Tensor& home) override { return home; }

  void synchronize() override {
    c10::cuda::CUDAGuard guard(device_index());
    check(cudaDeviceSynchronize(), "synchronize");
  }

  MemoryStats memory_stats() const override {
    c10::cuda::CUDAGuard guard(device_index());
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device_index());
    // Index 0 is StatType::AGGREGATE in every LibTorch: 1.13 declares the enum in
    // c10/cuda/CUDACachingAllocator.h, 2.5+ in c10/core/CachingDeviceAllocator.h
    // (newer still in c10::CachingAllocator), so it is not named here.
    const auto& all = stats.allocated_bytes[0];
    std::size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) (void)cudaGetLastError();
    MemoryStats out{static_cast<std::uint64_t>(all.current), static_cast<std::uint64_t>(all.peak),
                    static_cast<std::uint64_t>(total_bytes),
                    static_cast<std::uint64_t>(free_bytes)};
    out.reserved_bytes = static_cast<std::uint64_t>(stats.reserved_bytes[0].current);
    return out;
  }

  void reset_peak() override {
    c10::cuda::CUDAGuard guard(device_index());
    c10::cuda::CUDACachingAllocator::resetPeakStats(device_index());
  }

 private:
  c10::DeviceIndex device_index() const { return static_cast<c10::DeviceIndex>(index_); }
  c10::cuda::CUDAStream compute_stream() const {
    return c10::cuda::getCurrentCUDAStream(device_index());
  }

  int index_;
  DeviceOptions options_;
  c10::cuda::CUDAStream transfer_;
  int allocations_ = 0;
  int copies_ = 0;
  // Shared with the pin handles, which unpin (and count down) when dropped.
  std::shared_ptr<std::atomic<std::uint64_t>> pinned_bytes_ =
      std::make_shared<std::atomic<std::uint64_t>>(0);
};

}  // namespace

std::unique_ptr<Device> make_cuda_device(int index, const DeviceOptions& options) {
  const int n = cuda_device_count();
  OMNI_CHECK(index >= 0 && index < n, ConfigError, "device cuda:", index, " does not exist (", n,
             " CUDA device(s) visible)");
  return std::make_unique<CudaDevice>(index, options);
}

}  // namespace omni::device::cuda
