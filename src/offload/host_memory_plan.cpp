// Note [Mapped homes] (host_memory_plan.h).
#include "omni/offload/host_memory_plan.h"

#include <algorithm>
#include <sstream>

#include "omni/device/device.h"
#include "omni/error.h"

namespace omni::offload {

std::string_view to_string(HomeKind kind) {
  switch (kind) {
    case HomeKind::pinned:
      return "pinned";
    case HomeKind::mapped:
      return "mapped";
  }
  return "?";
}

namespace {
// Lower first: the order in which components get what is left of the budget.
int swap_rank(Role role) {
  switch (role) {
    case Role::dit:
    case Role::split:
      return 0;
    case Role::encoder:
      return 1;
    case Role::vae:
    case Role::resident:
      return 2;
  }
  return 2;
}
}  // namespace

HostMemoryPlan HostMemoryPlan::make(const std::vector<Component>& components,
                                    std::optional<std::uint64_t> budget_bytes,
                                    std::uint64_t staging_bytes) {
  HostMemoryPlan plan;
  plan.budget_bytes = budget_bytes;
  plan.components = components;
  if (!budget_bytes) {
    for (auto& c : plan.components) c.kind = HomeKind::pinned;
    return plan;
  }
  OMNI_CHECK(staging_bytes > 0, ConfigError,
             "--pinned-staging must be positive with a host memory budget");
  OMNI_CHECK(*budget_bytes >= staging_bytes, ConfigError, "host memory budget ",
             device::format_bytes(*budget_bytes), " cannot hold the pinned staging ring (",
             device::format_bytes(staging_bytes),
             "); raise --host-memory-budget or lower "
             "--pinned-staging");
  plan.staging_bytes = staging_bytes;
  std::uint64_t left = *budget_bytes - staging_bytes;
  std::vector<std::size_t> order(plan.components.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return swap_rank(plan.components[a].role) < swap_rank(plan.components[b].role);
  });
  for (const auto i : order) {
    auto& c = plan.components[i];
    const bool swapped = swap_rank(c.role) < 2;
    if (swapped && c.bytes <= left) {
      c.kind = HomeKind::pinned;
      left -= c.bytes;
    } else {
      c.kind = HomeKind::mapped;
    }
  }
  return plan;
}

HomeKind HostMemoryPlan::kind_of(const std::string& component) const {
  for (const auto& c : components)
    if (c.name == component) return c.kind;
  return HomeKind::pinned;
}

bool HostMemoryPlan::maps_any() const {
  return std::any_of(components.begin(), components.end(),
                     [](const Component& c) { return c.kind == HomeKind::mapped; });
}

std::uint64_t HostMemoryPlan::pinned_bytes() const {
  std::uint64_t n = staging_bytes;
  for (const auto& c : components)
    if (c.kind == HomeKind::pinned) n += c.bytes;
  return n;
}

std::uint64_t HostMemoryPlan::mapped_bytes() const {
  std::uint64_t n = 0;
  for (const auto& c : components)
    if (c.kind == HomeKind::mapped) n += c.bytes;
  return n;
}

nlohmann::json HostMemoryPlan::to_json() const {
  nlohmann::json j;
  j["budget_bytes"] = budget_bytes ? nlohmann::json(*budget_bytes) : nlohmann::json(nullptr);
  j["staging_bytes"] = staging_bytes;
  j["pinned_bytes"] = pinned_bytes();
  j["mapped_bytes"] = mapped_bytes();
  j["components"] = nlohmann::json::array();
  for (const auto& c : components)
    j["components"].push_back({{"name", c.name},
                               {"role", std::string(to_string(c.role))},
                               {"bytes", c.bytes},
                               {"home", std::string(to_string(c.kind))}});
  return j;
}

std::string HostMemoryPlan::to_table() const {
  std::ostringstream out;
  using device::format_bytes;
  out << "host memory for weights ("
      << (budget_bytes ? "--host-memory-budget " + format_bytes(*budget_bytes) : "no budget")
      << "): pinned " << format_bytes(pinned_bytes()) << ", mapped " << format_bytes(mapped_bytes())
      << " (page cache, reclaimable)\n";
  std::size_t width = 0;
  for (const auto& c : components) width = std::max(width, c.name.size());
  for (const auto& c : components)
    out << "  " << c.name << std::string(width - c.name.size(), ' ') << "  " << to_string(c.kind)
        << "  " << format_bytes(c.bytes) << "\n";
  if (staging_bytes)
    out << "  " << std::string("staging ring") << std::string(width > 12 ? width - 12 : 0, ' ')
        << "  pinned  " << format_bytes(staging_bytes) << "\n";
  return out.str();
}

}  // namespace omni::offload
