#include "omni/offload/mover.h"

#include <algorithm>

#include "offload/rebind.h"
#include "omni/error.h"
#include "omni/offload/staging_ring.h"

namespace omni::offload {

namespace {
// A device tensor aliasing buffer[offset, offset + bytes) with home's shape.
torch::Tensor device_view(const torch::Tensor& buffer, std::size_t offset,
                          const torch::Tensor& home) {
  const auto element = static_cast<std::size_t>(home.element_size());
  OMNI_INTERNAL_ASSERT(offset % element == 0, "misaligned slot");
  auto view =
      torch::empty({0}, torch::TensorOptions().dtype(home.scalar_type()).device(buffer.device()));
  view.set_(buffer.storage(), static_cast<std::int64_t>(offset / element), home.sizes(),
            home.strides());
  return view;
}
// The byte ranges of a group's tensors in the region, adjacent ones merged
// (weights whose sizes are multiples of the alignment make one run).
std::vector<std::pair<std::size_t, std::size_t>> payload_runs(const HostHome& home,
                                                              const TensorGroup& group) {
  std::vector<std::pair<std::size_t, std::size_t>> runs;
  for (auto index : group.slots) {
    const auto& slot = home.slots()[index];
    runs.emplace_back(slot.offset, slot.offset + slot.bytes);
  }
  std::sort(runs.begin(), runs.end());
  std::vector<std::pair<std::size_t, std::size_t>> merged;
  for (const auto& run : runs) {
    if (run.first == run.second) continue;
    if (!merged.empty() && run.first <= merged.back().second)
      merged.back().second = std::max(merged.back().second, run.second);
    else
      merged.push_back(run);
  }
  return merged;
}
}  // namespace

Mover::~Mover() {
  drain();
}

ResidentGroup Mover::upload(HostHome& home, std::size_t g) {
  prune();
  const auto& group = home.groups().at(g);
  const auto& region = home.region();
  ResidentGroup out;
  const std::size_t size = group.end - group.begin;
  out.buffer = device_.allocate(std::max<std::size_t>(size, 1));
  out.timer = device_.start_transfer_timer();
  if (auto* ring = home.staging()) {
    // A mapped home (Note [Mapped homes]): each tensor from the file's
    // pages through the pinned ring, to the offset a pinned home would use.
    for (auto index : group.slots) {
      const auto& slot = home.slots()[index];
      if (!slot.bytes) continue;
      out.pinned =
          ring->upload(out.buffer, slot.offset - group.begin, slot.home.data_ptr(), slot.bytes) &&
          out.pinned;
      out.bytes += slot.bytes;
    }
  }
  // The tensors' bytes only: alignment padding between them stays behind.
  for (const auto& [begin, end] : payload_runs(home, group)) {
    for (const auto& piece : region.pieces()) {
      const std::size_t lo = std::max(piece.begin, begin);
      const std::size_t hi = std::min(piece.end, end);
      if (lo >= hi) continue;
      device_.copy_to_device(out.buffer, lo - group.begin, region.data() + lo, hi - lo,
                             piece.pinned);
      out.pinned = out.pinned && piece.pinned;
      out.bytes += hi - lo;
    }
  }
  out.timer->stop();
  out.fence = device_.fence_uploads();
  for (auto index : group.slots) {
    auto& slot = home.slots()[index];
    rebind(slot.live, device_view(out.buffer, slot.offset - group.begin, slot.home));
  }
  return out;
}

std::unique_ptr<device::DeviceDuration> Mover::wait(ResidentGroup& group) {
  if (group.ready || !group.fence) return nullptr;
  auto waited = device_.wait_for(group.fence);
  group.ready = true;
  return waited;
}

void Mover::release(HostHome& home, std::size_t g, ResidentGroup& group, bool at_home) {
  for (auto index : home.groups().at(g).slots) {
    auto& slot = home.slots()[index];
    rebind(slot.live, at_home ? slot.home : device_.offloaded_view(slot.home));
  }
  if (group.buffer.defined()) {
    device_.retire(group.buffer);  // compute that read it finishes first
    // A copy still writing into it keeps it (on sim the copy holds it too).
    if (group.fence && !group.fence->done())
      keep_until_copied(std::make_shared<torch::Tensor>(group.buffer));
  }
  group = ResidentGroup();  // the device copy dies here: zero bytes go back
}

void Mover::keep_until_copied(std::shared_ptr<const void> owner) {
  if (!owner) return;
  kept_.emplace_back(device_.fence_uploads(), std::move(owner));
}

void Mover::prune() {
  std::erase_if(kept_, [](auto& k) { return k.first->done(); });
}

void Mover::drain() noexcept {
  for (auto& [fence, owner] : kept_) {
    try {
      fence->synchronize();
    } catch (...) {
    }
  }
  kept_.clear();
}

}  // namespace omni::offload
