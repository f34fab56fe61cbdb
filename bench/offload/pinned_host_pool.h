// A stand-in for PyTorch's CachingHostAllocator, the pool that
// `tensor.pin_memory()` and `tensor.to("cpu", non_blocking=True)` draw
// page-locked memory from in the movers that `omni bench offload` reproduces.
// Like torch 2.x's: every request is rounded up to a power of two, a freed
// block waits in a free list for its size and is handed out again, and
// nothing goes back to the OS while the pool lives. A request that finds no
// free block maps and page-locks a new one on the spot: that is the cost of
// "re-pinning" on offload, paid whenever the pool has to grow.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "omni/device/device.h"

namespace omni::bench {

class PinnedHostPool {
 public:
  // Pins through `device`, which must outlive every block.
  explicit PinnedHostPool(device::Device& device);
  PinnedHostPool(const PinnedHostPool&) = delete;
  PinnedHostPool& operator=(const PinnedHostPool&) = delete;
  ~PinnedHostPool();

  // A uint8 host tensor of `bytes` at the start of a block of the next power
  // of two. The block returns to the free list when the tensor's storage
  // dies. `pinned` says whether the block is page-locked (the host may refuse).
  torch::Tensor acquire(std::size_t bytes, bool* pinned);

  std::uint64_t reserved_bytes() const;  // every block, in use or cached
  std::uint64_t peak_reserved_bytes() const;
  std::uint64_t pinned_reserved_bytes() const;
  std::uint64_t in_use_bytes() const;
  double grow_seconds() const;  // spent mapping and page-locking new blocks

 private:
  struct Block {
    void* data = nullptr;
    std::size_t size = 0;
    std::shared_ptr<void> pin;  // null: the host refused, the block is pageable
  };
  struct State {
    explicit State(device::Device& d) : device(d) {}
    ~State();
    device::Device& device;
    mutable std::mutex mutex;
    std::vector<std::unique_ptr<Block>> blocks;
    std::map<std::size_t, std::vector<Block*>> free;
    std::uint64_t reserved = 0, peak = 0, pinned = 0, in_use = 0;
    double grow_seconds = 0;
  };
  std::shared_ptr<State> state_;
};

}  // namespace omni::bench
