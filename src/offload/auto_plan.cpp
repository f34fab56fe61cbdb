#include "omni/offload/auto_plan.h"

#include <algorithm>
#include <map>

#include "omni/device/device.h"
#include "omni/error.h"
#include "omni/offload/backend.h"
#include "omni/offload/host_home.h"

namespace omni::offload {

std::uint64_t device_budget(const device::Device& device, const OffloadOptions& options) {
  if (options.device_memory_budget) return *options.device_memory_budget;
  const auto stats = device.memory_stats();
  if (stats.capacity_bytes == 0) return 0;
  const auto memory =
      stats.free_bytes > 0 ? stats.free_bytes + stats.allocated_bytes : stats.capacity_bytes;
  std::uint64_t reserve = 0;
  if (options.reserve_bytes)
    reserve = *options.reserve_bytes;
  else if (!device.is_stand_in())
    reserve = std::max<std::uint64_t>(stats.capacity_bytes / 5, 4ull << 30);
  return memory > reserve ? memory - reserve : 0;
}

bool is_block_group(const std::string& group) {
  const auto dot = group.rfind('.');
  const auto last = dot == std::string::npos ? group : group.substr(dot + 1);
  return !last.empty() &&
         std::all_of(last.begin(), last.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
}

ComponentSize measure_component(const std::string& name, Role role, torch::nn::Module& module) {
  ComponentSize out{name, role};
  std::map<std::string, std::uint64_t> groups;
  for (const auto& e : unique_tensors(module)) {
    const auto bytes = static_cast<std::uint64_t>(e.tensor.numel()) * e.tensor.element_size();
    out.bytes += bytes;
    groups[e.group] += bytes;
  }
  for (const auto& [group, bytes] : groups) {
    out.largest_group = std::max(out.largest_group, bytes);
    if (!is_block_group(group)) continue;
    out.block_bytes += bytes;
    out.largest_block = std::max(out.largest_block, bytes);
  }
  return out;
}

namespace {

using device::format_bytes;

std::vector<PolicyState::Entry> whole_entries(const std::vector<ComponentSize>& components,
                                              bool layerwise) {
  std::vector<PolicyState::Entry> entries;
  for (const auto& c : components) {
    PolicyState::Entry e{c.name, c.role, c.bytes, 0, c.role != Role::resident};
    if (layerwise && c.role == Role::dit) {  // its non-block tensors never leave
      e.bytes -= c.block_bytes;
      e.swappable = false;
    }
    entries.push_back(std::move(e));
  }
  return entries;
}

// The second of two requests: what the policy's exact plan adds for it.
std::uint64_t steady_state(const std::vector<PolicyState::Entry>& entries,
                           const std::vector<std::size_t>& calls, std::uint64_t budget) {
  const std::vector<bool> none(entries.size(), false);
  auto two = calls;
  two.insert(two.end(), calls.begin(), calls.end());
  return plan_evictions(entries, none, two, budget).upload_bytes -
         plan_evictions(entries, none, calls, budget).upload_bytes;
}

std::uint64_t window_bytes(const std::vector<ComponentSize>& components, std::size_t prefetch) {
  std::uint64_t largest = 0;
  for (const auto& c : components)
    if (c.role == Role::dit) largest = std::max(largest, c.largest_block);
  return (prefetch + 1) * largest;
}

std::uint64_t total_bytes(const std::vector<ComponentSize>& components) {
  std::uint64_t total = 0;
  for (const auto& c : components) total += c.bytes;
  return total;
}

std::uint64_t model_level_peak(const std::vector<ComponentSize>& components) {
  std::vector<std::pair<Role, std::uint64_t>> sizes;
  for (const auto& c : components) sizes.emplace_back(c.role, c.bytes);
  return planned_model_level_peak(sizes);
}

}  // namespace

std::uint64_t bytes_per_request(PolicyKind kind, const std::vector<ComponentSize>& components,
                                std::uint64_t budget, std::size_t prefetch,
                                const std::vector<std::size_t>& calls) {
  switch (kind) {
    case PolicyKind::all_resident:
      OMNI_CHECK(total_bytes(components) <= budget, ConfigError, "all-resident needs ",
                 format_bytes(total_bytes(components)), ", over the budget of ",
                 format_bytes(budget));
      return 0;
    case PolicyKind::model_level: {
      const auto peak = model_level_peak(components);
      OMNI_CHECK(peak <= budget, ConfigError, "model-level offload needs ", format_bytes(peak),
                 ", over the budget of ", format_bytes(budget));
      std::vector<bool> called(components.size(), false);
      for (auto i : calls) called[i] = true;
      std::uint64_t bytes = 0;
      for (std::size_t i = 0; i < components.size(); ++i) {
        const auto role = components[i].role;
        if (called[i] && (role == Role::dit || role == Role::encoder || role == Role::split))
          bytes += components[i].bytes;
      }
      return bytes;
    }
    case PolicyKind::budget:
      return steady_state(whole_entries(components, false), calls, budget);
    case PolicyKind::layerwise: {
      const auto window = window_bytes(components, prefetch);
      OMNI_CHECK(window > 0, ConfigError, "layerwise offload needs DiT blocks (blocks.N)");
      const auto entries = whole_entries(components, true);
      std::uint64_t fixed = 0;
      for (const auto& e : entries)
        if (!e.swappable) fixed += e.bytes;
      OMNI_CHECK(window + fixed < budget, ConfigError, "layerwise offload needs ",
                 format_bytes(window + fixed), " (", prefetch + 1,
                 " blocks in flight and the tensors that never leave), over the budget of ",
                 format_bytes(budget));
      std::uint64_t blocks = 0;
      for (auto i : calls)
        if (components[i].role == Role::dit) blocks += components[i].block_bytes;
      return blocks + steady_state(entries, calls, budget - window);
    }
  }
  return 0;
}

OffloadChoice choose_offload(const std::vector<ComponentSize>& components, std::uint64_t budget,
                             std::size_t prefetch, const std::vector<std::size_t>& calls) {
  OffloadChoice choice;
  choice.budget_bytes = budget;
  const auto total = total_bytes(components);
  if (total <= budget) {
    choice.kind = PolicyKind::all_resident;
    choice.planned_peak_bytes = total;
    choice.why = detail::concat("all ", format_bytes(total), " of weights fit the budget of ",
                                format_bytes(budget));
    return choice;
  }
  std::uint64_t largest_group = 0, fixed = 0, largest_whole = 0;
  const ComponentSize* largest = nullptr;
  for (const auto& c : components) {
    largest_group = std::max(largest_group, c.largest_group);
    if (c.role == Role::resident) fixed += c.bytes;
    if (c.role != Role::resident && c.bytes >= largest_whole) {
      largest_whole = c.bytes;
      largest = &c;
    }
  }
  const auto peak = model_level_peak(components);
  if (peak + 2 * largest_group <= budget) {
    const auto model_level =
        bytes_per_request(PolicyKind::model_level, components, budget, prefetch, calls);
    const auto kept = bytes_per_request(PolicyKind::budget, components, budget, prefetch, calls);
    if (kept < model_level) {
      choice.kind = PolicyKind::budget;
      choice.planned_peak_bytes = budget;
      choice.bytes_per_request = kept;
      choice.why = detail::concat(
          "one phase at a time fits (model-level peak ", format_bytes(peak),
          "), and the budget keeps more resident across phases: ", format_bytes(kept),
          " uploaded per request instead of ", format_bytes(model_level));
    } else {
      choice.kind = PolicyKind::model_level;
      choice.planned_peak_bytes = peak + 2 * largest_group;
      choice.bytes_per_request = model_level;
      choice.why =
          detail::concat("one phase at a time fits: the model-level peak ", format_bytes(peak),
                         " + 2 × the largest block group ", format_bytes(largest_group),
                         " ≤ the budget of ", format_bytes(budget));
    }
    return choice;
  }
  if (largest_whole + fixed <= budget) {
    choice.kind = PolicyKind::budget;
    choice.planned_peak_bytes = budget;
    choice.bytes_per_request =
        bytes_per_request(PolicyKind::budget, components, budget, prefetch, calls);
    choice.why = detail::concat("every component fits the budget of ", format_bytes(budget),
                                " on its own, but not the model-level peak ", format_bytes(peak),
                                " + 2 × ", format_bytes(largest_group), " that rolling swaps need");
    return choice;
  }
  choice.kind = PolicyKind::layerwise;
  choice.planned_peak_bytes = budget;
  choice.bytes_per_request =
      bytes_per_request(PolicyKind::layerwise, components, budget, prefetch, calls);
  choice.why = detail::concat(
      largest ? to_string(largest->role) : "the", " '", largest ? largest->name : "?", "' (",
      format_bytes(largest_whole), ") does not fit the budget of ", format_bytes(budget),
      ": DiT blocks stream through every call, ", prefetch + 1, " at a time");
  return choice;
}

}  // namespace omni::offload
