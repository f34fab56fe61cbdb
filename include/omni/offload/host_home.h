// Host homes (design.md §2 rules 3 and 5): the one authoritative host copy of
// every swappable tensor of a component, made once at enable time.
//
// A component's home is one host region laid out in execution order and cut
// into tensor groups (its blocks). The region is page-locked in pieces of at
// most `max_pin_chunk_bytes`; when the host refuses, the rest stays pageable
// and one warning is printed. Uploads copy group ranges piece by piece.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "omni/device/device.h"
#include "omni/offload/host_memory_plan.h"

namespace omni::offload {

// A page-aligned anonymous host mapping. Unpins and unmaps on destruction.
class HostRegion {
 public:
  struct Piece {
    std::size_t begin;
    std::size_t end;
    bool pinned;
    std::shared_ptr<void> pin;  // unpins on destruction
  };
  HostRegion(std::size_t bytes, device::Device& device, std::size_t max_pin_chunk_bytes, bool pin,
             bool* pin_refused);
  ~HostRegion();
  HostRegion(const HostRegion&) = delete;
  HostRegion& operator=(const HostRegion&) = delete;

  std::byte* data() const { return data_; }
  std::size_t size() const { return bytes_; }
  const std::vector<Piece>& pieces() const { return pieces_; }
  std::uint64_t pinned_bytes() const;

 private:
  std::byte* data_ = nullptr;
  std::size_t bytes_ = 0;
  std::size_t mapped_ = 0;
  std::vector<Piece> pieces_;
};

// One swappable tensor: the live parameter/buffer (whose TensorImpl gets
// rebound) and its home view.
// Where each tensor starts in a home, and in the device buffer of its group.
inline constexpr std::size_t kTensorAlignment = 256;  // every dtype, and DMA engines

struct TensorSlot {
  std::string name;
  torch::Tensor live;
  torch::Tensor home;                 // CPU view into the region
  torch::Device origin{torch::kCPU};  // where `live` was before the home was made
  std::size_t offset = 0;
  std::size_t bytes = 0;
};

struct TensorGroup {
  std::string name;       // "" for the component's own tensors, else a child path
  std::size_t begin = 0;  // byte range in the region
  std::size_t end = 0;
  std::vector<std::size_t> slots;
};

class StagingRing;

// Which homes are mapped, and the ring their uploads go through (Note
// [Mapped homes]); empty: every home pinned.
struct MappedHomes {
  std::shared_ptr<const HostMemoryPlan> plan;
  std::shared_ptr<StagingRing> staging;
};

struct HostHomeOptions {
  bool pin_memory = true;
  std::size_t max_pin_chunk_bytes = 256ull << 20;
  MappedHomes mapped;
};

class HostHome {
 public:
  // Copies every tensor of `module` (deduplicated by identity, so tied
  // weights get one home) into a new region. Does not modify the module
  // itself; `on_copied`, when given, is called with each slot as soon as its
  // home holds the data, so the caller can release the original right away
  // and host memory never holds a second full copy of the component.
  // `pin_refused` is shared by all homes so the fallback warns once.
  // ConfigError before anything is copied when a tensor is not materialised.
  // A pinned home is filled by a few threads at once, a batch at a time
  // (Note [Weights that alias the file]: from the mapped checkpoint, one
  // copy). A home the plan maps copies nothing: each slot's home is the
  // tensor as loaded (the file's pages), laid out in the same offsets.
  static std::unique_ptr<HostHome> build(const std::string& component, torch::nn::Module& module,
                                         device::Device& device, const HostHomeOptions& options,
                                         bool* pin_refused,
                                         const std::function<void(TensorSlot&)>& on_copied = {});

  const std::string& component() const { return component_; }
  HomeKind kind() const { return kind_; }
  // The ring a mapped home uploads through (null for a pinned home).
  StagingRing* staging() const { return staging_.get(); }
  std::vector<TensorSlot>& slots() { return slots_; }
  const std::vector<TensorSlot>& slots() const { return slots_; }
  const std::vector<TensorGroup>& groups() const { return groups_; }
  const HostRegion& region() const { return *region_; }
  // The region, for keeping it alive past the home (Note [Lifetimes of copies in flight]).
  std::shared_ptr<const HostRegion> region_ptr() const { return region_; }
  // Bytes of the tensors of group `g` (its range less alignment padding).
  std::uint64_t payload_bytes(std::size_t g) const;
  std::uint64_t bytes() const { return payload_bytes_; }
  std::uint64_t mapped_bytes() const { return kind_ == HomeKind::mapped ? payload_bytes_ : 0; }
  std::uint64_t pinned_bytes() const { return region_->pinned_bytes(); }
  std::uint64_t pageable_bytes() const { return region_->size() - region_->pinned_bytes(); }

 private:
  std::string component_;
  HomeKind kind_ = HomeKind::pinned;
  std::shared_ptr<StagingRing> staging_;
  std::shared_ptr<HostRegion> region_;
  std::vector<TensorSlot> slots_;
  std::vector<TensorGroup> groups_;
  std::uint64_t payload_bytes_ = 0;
};

// The unique tensors (parameters then buffers) of a module, in registration
// order, grouped by child block; used for homes and for planning.
struct TensorEntry {
  std::string name;
  torch::Tensor tensor;
  std::string group;
};
std::vector<TensorEntry> unique_tensors(torch::nn::Module& module);
std::uint64_t tensor_bytes(torch::nn::Module& module);

}  // namespace omni::offload
