#include "omni/offload/staging_ring.h"

#include <cstring>

#include "omni/error.h"
#include "omni/offload/host_home.h"

namespace omni::offload {

StagingRing::StagingRing(device::Device& device, std::size_t total_bytes, std::size_t buffers)
    : device_(device) {
  OMNI_CHECK(buffers >= 1 && total_bytes >= buffers, ConfigError,
             "the pinned staging ring needs at least one byte per buffer");
  const std::size_t each = total_bytes / buffers;
  for (std::size_t i = 0; i < buffers; ++i)
    slots_.push_back(
        {std::make_shared<HostRegion>(each, device, each, /*pin=*/true, &pin_refused_), nullptr});
}

StagingRing::~StagingRing() {
  for (auto& slot : slots_) {
    if (!slot.fence) continue;
    try {
      slot.fence->synchronize();
    } catch (...) {
    }
  }
}

bool StagingRing::upload(torch::Tensor& buffer, std::size_t offset, const void* src,
                         std::size_t bytes) {
  bool pinned = true;
  const auto* from = static_cast<const std::byte*>(src);
  for (std::size_t done = 0; done < bytes;) {
    auto& slot = slots_[next_];
    next_ = (next_ + 1) % slots_.size();
    if (slot.fence && !slot.fence->done()) {
      ++waits_;
      slot.fence->synchronize();
    }
    const std::size_t n = std::min(bytes - done, slot.region->size());
    std::memcpy(slot.region->data(), from + done, n);
    const bool piece_pinned = slot.region->pinned_bytes() == slot.region->size();
    device_.copy_to_device(buffer, offset + done, slot.region->data(), n, piece_pinned);
    slot.fence = device_.fence_uploads();
    pinned = pinned && piece_pinned;
    done += n;
  }
  return pinned;
}

std::uint64_t StagingRing::bytes() const {
  std::uint64_t n = 0;
  for (const auto& slot : slots_) n += slot.region->size();
  return n;
}

std::uint64_t StagingRing::pinned_bytes() const {
  std::uint64_t n = 0;
  for (const auto& slot : slots_) n += slot.region->pinned_bytes();
  return n;
}

}  // namespace omni::offload
