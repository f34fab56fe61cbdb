// A bounded ring of pinned staging buffers for uploads from mapped homes
// (Note [Mapped homes], host_memory_plan.h).
//
//   StagingRing ring(device, 512ull << 20);            // 2 × 256 MiB, page-locked
//   ring.upload(buffer, offset, mapped_ptr, bytes);    // memcpy into a free buffer, async upload
//
// A buffer is reused only after the fence of the upload that read it is
// done, so host memory stays at `bytes` however much goes through. If the
// host refuses to pin, the buffers stay pageable (one warning, shared with
// the homes' flag) and uploads from them are marked pageable.
//
// Threading: the host thread that drives the offload backend. Destroy it
// before the device (it waits for its uploads).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "omni/device/device.h"

namespace omni::offload {

class HostRegion;

class StagingRing {
 public:
  // `total_bytes` split into `buffers` buffers (each at least one page).
  StagingRing(device::Device& device, std::size_t total_bytes, std::size_t buffers = 2);
  ~StagingRing();  // waits for every upload it enqueued
  StagingRing(const StagingRing&) = delete;
  StagingRing& operator=(const StagingRing&) = delete;

  // Copies src[0, bytes) into buffer[offset, offset + bytes) on the device
  // through the ring (in pieces of at most one buffer). Returns once every
  // piece is enqueued; `src` may go away then, `buffer` may not until a
  // fence made afterwards is done. Returns whether every piece came from
  // page-locked memory.
  bool upload(torch::Tensor& buffer, std::size_t offset, const void* src, std::size_t bytes);

  std::uint64_t bytes() const;
  std::uint64_t pinned_bytes() const;
  // Pieces that waited for a buffer to come free (the ring was the limit).
  std::uint64_t waits() const { return waits_; }

 private:
  struct Slot {
    std::shared_ptr<HostRegion> region;
    std::shared_ptr<device::UploadFence> fence;  // of the last upload from it
  };
  device::Device& device_;
  std::vector<Slot> slots_;
  std::size_t next_ = 0;
  std::uint64_t waits_ = 0;
  bool pin_refused_ = false;
};

}  // namespace omni::offload
