// The CUDA device on its own (Note [Uploads on the transfer stream] in
// src/device/cuda/cuda_device.cpp): page-locking, uploads on the transfer
// stream, compute waiting on an event, typed out-of-memory.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <iostream>

#include "gpu/cuda_fixture.h"
#include "omni/error.h"
#include "omni/offload/host_home.h"

using namespace omni;
using gpu_test::seconds_since;
using Clock = std::chrono::steady_clock;

namespace {

// A host buffer of `bytes` (a multiple of 1 MiB) holding a pattern that is
// nowhere zero.
torch::Tensor pattern(std::int64_t bytes) {
  const std::int64_t period = 1 << 20;
  auto one = (torch::arange(period, torch::kInt32) % 251 + 1).to(torch::kUInt8);
  return one.repeat({bytes / period});
}

}  // namespace

using CudaDevice = gpu_test::Cuda;

TEST_F(CudaDevice, PinHostPageLocksUntilTheHandleDies) {
  auto host = pattern(8 << 20);
  EXPECT_FALSE(host.is_pinned());
  auto pin = device_->pin_host(host.data_ptr(), static_cast<std::size_t>(host.numel()));
  ASSERT_NE(pin, nullptr) << "cudaHostRegister refused 8 MiB";
  EXPECT_TRUE(host.is_pinned());
  EXPECT_TRUE(host.narrow(0, 3 << 20, 1024).is_pinned()) << "the whole range, not its start";
  pin.reset();
  EXPECT_FALSE(host.is_pinned()) << "the handle unregisters on destruction";
}

TEST_F(CudaDevice, HostRegionPinsEveryChunk) {
  bool refused = false;
  const std::size_t bytes = (10u << 20) + 12345;  // not a multiple of the chunk
  offload::HostRegion region(bytes, *device_, /*max_pin_chunk_bytes=*/1 << 20, /*pin=*/true,
                             &refused);
  EXPECT_FALSE(refused);
  EXPECT_EQ(region.pieces().size(), 11u);
  EXPECT_EQ(region.pinned_bytes(), bytes);
  for (const auto& piece : region.pieces()) {
    EXPECT_TRUE(piece.pinned);
    EXPECT_LE(piece.end - piece.begin, std::size_t{1} << 20);
    auto view = torch::from_blob(region.data() + piece.begin,
                                 {static_cast<std::int64_t>(piece.end - piece.begin)},
                                 torch::TensorOptions().dtype(torch::kUInt8));
    EXPECT_TRUE(view.is_pinned()) << "piece at " << piece.begin << " is not page-locked";
  }
}

// Without the event, compute would read the buffer while the transfer stream
// is still writing it: the tail of a 512 MiB copy is not there yet.
TEST_F(CudaDevice, ComputeWaitsForPublishedUploads) {
  const std::int64_t bytes = 512 << 20, tail = 1 << 20;
  auto host = pattern(bytes);
  auto pin = device_->pin_host(host.data_ptr(), static_cast<std::size_t>(bytes));
  ASSERT_NE(pin, nullptr);
  auto expected_tail = host.narrow(0, bytes - tail, tail).to(device_->compute_device());
  auto buffer = device_->allocate(static_cast<std::size_t>(bytes));
  buffer.zero_();
  device_->synchronize();  // the zeros land before the copy starts

  device_->copy_to_device(buffer, 0, host.data_ptr(), static_cast<std::size_t>(bytes), true);
  device_->wait_for(device_->fence_uploads());
  // Enqueued on the compute stream right away; correct only if it waited.
  EXPECT_TRUE(torch::equal(buffer.narrow(0, bytes - tail, tail), expected_tail));
  EXPECT_TRUE(torch::equal(buffer.cpu(), host));
  device_->retire(buffer);
}

// The compute stream is kept busy for a while; an upload enqueued behind that
// work finishes long before it does, so it ran on another stream, and the
// host got control back before the copy was done.
TEST_F(CudaDevice, UploadsRunOnTheTransferStreamBesideBusyCompute) {
  const std::int64_t bytes = 256 << 20;
  auto host = pattern(bytes);
  auto pin = device_->pin_host(host.data_ptr(), static_cast<std::size_t>(bytes));
  ASSERT_NE(pin, nullptr);
  auto buffer = device_->allocate(static_cast<std::size_t>(bytes));
  auto a = torch::randn({8192, 8192}, cuda());
  device_->synchronize();

  const auto start = Clock::now();
  torch::Tensor busy;
  for (int i = 0; i < 16; ++i) busy = torch::mm(a, a);  // ~18 TFLOP on the compute stream
  const auto enqueue = Clock::now();
  auto timer = device_->start_transfer_timer();
  device_->copy_to_device(buffer, 0, host.data_ptr(), static_cast<std::size_t>(bytes), true);
  timer->stop();
  const double enqueue_seconds = seconds_since(enqueue);
  const double copy_seconds = timer->seconds();  // waits for the transfer stream only
  const double copy_done = seconds_since(start);
  device_->synchronize();
  const double compute_done = seconds_since(start);

  const double gbps = static_cast<double>(bytes) / copy_seconds / 1e9;
  std::cout << "[ upload   ] 256 MiB pinned in " << copy_seconds * 1e3 << " ms (" << gbps
            << " GB/s), host enqueue " << enqueue_seconds * 1e6 << " us; copy done at "
            << copy_done * 1e3 << " ms, compute at " << compute_done * 1e3 << " ms\n";
  // Timed by events on the transfer stream: the copy lies between them.
  EXPECT_GT(gbps, 1.0);
  EXPECT_LT(gbps, 1000.0) << "the copy did not run between the transfer stream's events";
  EXPECT_LT(enqueue_seconds, copy_seconds / 2) << "the host waited for the copy";
  EXPECT_LT(copy_done, compute_done / 2) << "the copy waited for the compute stream";
  EXPECT_TRUE(torch::equal(buffer.cpu(), host));
}

// H3 of the GPU review: the same, but the weight buffer is allocated after
// the compute is queued, as a prefetch in a pre-forward hook does. allocate()
// makes the transfer stream wait for every kernel queued so far, so the copy
// cannot overlap that compute. Disabled: it fails until weights get their own
// arena (issue 33, item 3); scripts/gpu-check.sh runs it to show the gap.
TEST_F(CudaDevice, DISABLED_AnUploadAllocatedAfterQueuedComputeOverlapsIt) {
  const std::int64_t bytes = 256 << 20;
  auto host = pattern(bytes);
  auto pin = device_->pin_host(host.data_ptr(), static_cast<std::size_t>(bytes));
  ASSERT_NE(pin, nullptr);
  auto a = torch::randn({8192, 8192}, cuda());
  device_->synchronize();

  const auto start = Clock::now();
  torch::Tensor busy;
  for (int i = 0; i < 16; ++i) busy = torch::mm(a, a);
  auto buffer = device_->allocate(static_cast<std::size_t>(bytes));  // after the compute
  auto timer = device_->start_transfer_timer();
  device_->copy_to_device(buffer, 0, host.data_ptr(), static_cast<std::size_t>(bytes), true);
  timer->stop();
  (void)timer->seconds();  // waits for the transfer stream only
  const double copy_done = seconds_since(start);
  device_->synchronize();
  const double compute_done = seconds_since(start);
  std::cout << "[ upload   ] allocated after queued compute: copy done at " << copy_done * 1e3
            << " ms, compute at " << compute_done * 1e3 << " ms\n";
  EXPECT_LT(copy_done, compute_done / 2) << "the copy waited for the queued compute (H3)";
  EXPECT_TRUE(torch::equal(buffer.cpu(), host));
}

TEST_F(CudaDevice, AllocationBeyondTheDeviceIsATypedOutOfMemory) {
  const auto before = allocated();
  const auto capacity = device_->memory_stats().capacity_bytes;
  ASSERT_GT(capacity, 0u) << "cudaMemGetInfo reported no capacity";
  try {
    (void)device_->allocate(static_cast<std::size_t>(capacity) * 2);
    FAIL() << "allocated twice the device's memory";
  } catch (const DeviceOutOfMemory& e) {
    EXPECT_NE(std::string(e.what()).find("out of device memory"), std::string::npos) << e.what();
  }
  EXPECT_EQ(allocated(), before);
  EXPECT_NO_THROW((void)device_->allocate(1 << 20)) << "the device is usable afterwards";
}
