// The host memory plan (design.md §2b, "two kinds of homes"): which
// components keep a pinned home and which keep their home in the mapped
// checkpoint, made from sizes alone before any weight is read, and shown
// by `omni inspect` and the offload report.
//
//   auto plan = HostMemoryPlan::make(components, /*budget=*/1ull << 30, /*staging=*/512ull << 20);
//   plan.kind_of("transformer");  // HomeKind::mapped: 28.6 GB do not fit in 1 GiB
//
// Note [Mapped homes]
// A pinned home is anonymous memory: it costs host RAM for as long as the
// engine lives, 69 GB for Wan2.2 A14B in bf16. A mapped home is the
// checkpoint's own pages (Note [Weights that alias the file]): the page
// cache holds them while there is room and the kernel drops and rereads
// them when there is not, so they count against no budget. Uploads cannot
// come straight from them at full speed (a DMA engine reads only page-locked
// memory), so they go through a ring of a few pinned staging buffers
// (offload/staging_ring.h): each piece is copied into a free buffer, then
// uploaded from it while the next is copied. With `--host-memory-budget B`
// the staging ring is taken out of B first; then components are pinned
// whole, in the order they swap most (DiTs and split components every
// request, encoders once), while they fit in what is left; the rest are
// mapped. VAE and resident components are uploaded once and never swapped:
// their homes are mapped whenever there is a budget. Without a budget every
// home is pinned and there is no ring. Both kinds hold the same bytes in
// the same layout, so what reaches the device is bitwise the same.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "omni/offload/components.h"

namespace omni::offload {

enum class HomeKind { pinned, mapped };
std::string_view to_string(HomeKind kind);

struct HostMemoryPlan {
  struct Component {
    std::string name;
    Role role = Role::dit;
    std::uint64_t bytes = 0;
    HomeKind kind = HomeKind::pinned;
  };
  std::optional<std::uint64_t> budget_bytes;  // nullopt: no budget, all pinned
  std::uint64_t staging_bytes = 0;            // the pinned staging ring (0 without a budget)
  std::vector<Component> components;

  // Plans `components` (name, role, bytes) as Note [Mapped homes] says.
  // ConfigError when the budget cannot hold the staging ring.
  static HostMemoryPlan make(const std::vector<Component>& components,
                             std::optional<std::uint64_t> budget_bytes,
                             std::uint64_t staging_bytes);
  // pinned for a component the plan does not list.
  HomeKind kind_of(const std::string& component) const;
  bool maps_any() const;
  // Pinned homes + the staging ring: the host memory the weights hold.
  std::uint64_t pinned_bytes() const;
  std::uint64_t mapped_bytes() const;
  nlohmann::json to_json() const;
  // One line per component and a total, for inspect and the report.
  std::string to_table() const;
};

}  // namespace omni::offload
