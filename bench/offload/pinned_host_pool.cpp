#include "bench/offload/pinned_host_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>

#include "omni/error.h"

namespace omni::bench {

PinnedHostPool::PinnedHostPool(device::Device& device) : state_(std::make_shared<State>(device)) {}

PinnedHostPool::~PinnedHostPool() = default;

PinnedHostPool::State::~State() {
  for (auto& block : blocks) {
    block->pin.reset();  // unpin before unmapping
    ::munmap(block->data, block->size);
  }
}

torch::Tensor PinnedHostPool::acquire(std::size_t bytes, bool* pinned) {
  const std::size_t size = std::bit_ceil(std::max<std::size_t>(bytes, 4096));
  Block* block = nullptr;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    auto& list = state_->free[size];
    if (!list.empty()) {
      block = list.back();
      list.pop_back();
    }
  }
  if (block == nullptr) {
    const auto start = std::chrono::steady_clock::now();
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
      throw DeviceOutOfMemory(detail::concat("host: cannot map a pinned block of ",
                                             device::format_bytes(size), ": ",
                                             std::strerror(errno)));
    auto owned = std::make_unique<Block>();
    owned->data = p;
    owned->size = size;
    owned->pin = state_->device.pin_host(p, size);
    block = owned.get();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->blocks.push_back(std::move(owned));
    state_->reserved += size;
    state_->peak = std::max(state_->peak, state_->reserved);
    if (block->pin) state_->pinned += size;
    state_->grow_seconds += seconds;
  }
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->in_use += size;
  }
  *pinned = block->pin != nullptr;
  auto state = state_;
  return torch::from_blob(
      block->data, {static_cast<std::int64_t>(bytes)},
      [state, block](void*) {
        std::lock_guard<std::mutex> lock(state->mutex);
        state->in_use -= block->size;
        state->free[block->size].push_back(block);
      },
      torch::TensorOptions().dtype(torch::kUInt8));
}

std::uint64_t PinnedHostPool::reserved_bytes() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->reserved;
}

std::uint64_t PinnedHostPool::peak_reserved_bytes() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->peak;
}

std::uint64_t PinnedHostPool::pinned_reserved_bytes() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->pinned;
}

std::uint64_t PinnedHostPool::in_use_bytes() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->in_use;
}

double PinnedHostPool::grow_seconds() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->grow_seconds;
}

}  // namespace omni::bench
