// The bench seam of a device: what only benchmarks need, kept out of the
// public Device interface. Weights never come back to the host (design.md
// §2 rule 3: offloading copies nothing back); `omni bench offload` needs
// these to reproduce the baselines that do copy back and empty the cache.
//
//   device::copy_back(device).copy_to_host(dst, buffer, 0, bytes);
#pragma once

#include <torch/types.h>

#include <cstddef>

#include "omni/device/device.h"

namespace omni::device {

class CopyBack {
 public:
  virtual ~CopyBack() = default;
  // Blocking device→host copy of buffer[offset, offset+bytes) into `dst`
  // (pageable or page-locked); returns once `dst` holds the bytes.
  virtual void copy_to_host(void* dst, const torch::Tensor& buffer, std::size_t offset,
                            std::size_t bytes) = 0;
  // Hands cached, unused device memory back to the driver (what
  // torch.cuda.empty_cache() does); blocks the host. A no-op where nothing
  // is cached (sim, cpu).
  virtual void release_cached_memory() = 0;
};

// The device's bench seam; InternalError for a device without one.
CopyBack& copy_back(Device& device);

}  // namespace omni::device
