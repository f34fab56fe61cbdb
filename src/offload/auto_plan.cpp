#include "omni/offload/auto_plan.h"

#include <algorithm>
#include <map>
#include <set>

#include "omni/device/device.h"
#include "omni/error.h"
#include "omni/offload/backend.h"
#include "omni/offload/host_home.h"

namespace omni::offload {

std::uint64_t device_budget(const device::Device& device, const OffloadOptions& options) {
  if (options.device_memory_budget) return *options.device_memory_budget;
  const auto stats = device.memory_stats();
  if (stats.capacity_bytes == 0) return 0;
  // What this process could use: free memory plus what its allocator holds,
  // cached blocks included (cudaMemGetInfo counts those as used).
  const auto memory =
      stats.free_bytes > 0 ? stats.free_bytes + stats.reserved_bytes : stats.capacity_bytes;
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

namespace {
// Sizes and the largest groups from the bytes of each group.
void add_groups(ComponentSize& out, const std::map<std::string, std::uint64_t>& groups) {
  for (const auto& [group, bytes] : groups) {
    out.bytes += bytes;
    out.largest_group = std::max(out.largest_group, bytes);
    if (!is_block_group(group)) continue;
    out.block_bytes += bytes;
    out.largest_block = std::max(out.largest_block, bytes);
  }
}
}  // namespace

ComponentSize measure_component(const std::string& name, Role role, torch::nn::Module& module) {
  std::map<std::string, std::uint64_t> groups;
  for (const auto& e : unique_tensors(module))
    groups[e.group] += static_cast<std::uint64_t>(e.tensor.numel()) * e.tensor.element_size();
  ComponentSize out{name, role};
  add_groups(out, groups);
  return out;
}

ComponentSize measure_named_tensors(
    const std::string& name, Role role,
    const std::vector<std::pair<std::string, std::uint64_t>>& tensor_bytes) {
  std::set<std::string> owners;  // module paths with tensors of their own
  for (const auto& [tensor, bytes] : tensor_bytes)
    if (const auto dot = tensor.rfind('.'); dot != std::string::npos)
      owners.insert(tensor.substr(0, dot));
  std::map<std::string, std::uint64_t> groups;
  for (const auto& [tensor, bytes] : tensor_bytes) {
    std::string group;  // the component's own tensors: ""
    for (auto dot = tensor.find('.'); dot != std::string::npos; dot = tensor.find('.', dot + 1)) {
      const auto path = tensor.substr(0, dot);
      if (owners.contains(path) || is_block_group(path)) {
        group = path;
        break;
      }
    }
    groups[group] += bytes;
  }
  ComponentSize out{name, role};
  add_groups(out, groups);
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
      OMNI_CHECK(window > 0, ConfigError,
                 "layerwise offload needs DiT blocks (modules named like blocks.N) to stream; "
                 "none were found");
      const auto entries = whole_entries(components, true);
      std::uint64_t fixed = 0;
      for (const auto& e : entries)
        if (!e.swappable) fixed += e.bytes;
      // The words of OffloadBackend's own check, which runs once the model has loaded.
      OMNI_CHECK(window + fixed < budget, ConfigError, "a device memory budget of ",
                 format_bytes(budget), " is too small for layerwise offload: ", prefetch + 1,
                 " blocks of ", format_bytes(window / (prefetch + 1)), " in flight and ",
                 format_bytes(fixed), " of tensors that never leave need more");
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

namespace {

// Two requests back to back: the second is the steady state.
std::vector<std::size_t> twice(const std::vector<std::size_t>& calls) {
  auto two = calls;
  two.insert(two.end(), calls.begin(), calls.end());
  return two;
}

// The most weight bytes the exact plan holds at once over `calls`
// (components that never leave count from the start).
std::uint64_t plan_peak(const std::vector<PolicyState::Entry>& entries,
                        const std::vector<std::size_t>& calls, std::uint64_t budget) {
  const auto plan =
      plan_evictions(entries, std::vector<bool>(entries.size(), false), calls, budget);
  std::vector<bool> on(entries.size(), false);
  std::uint64_t used = 0;
  for (std::size_t i = 0; i < entries.size(); ++i)
    if (!entries[i].swappable) {
      on[i] = true;
      used += entries[i].bytes;
    }
  std::uint64_t peak = used;
  for (std::size_t k = 0; k < calls.size(); ++k) {
    for (auto e : plan.evicted[k])
      if (on[e]) {
        on[e] = false;
        used -= entries[e].bytes;
      }
    if (!on[calls[k]]) {
      on[calls[k]] = true;
      used += entries[calls[k]].bytes;
    }
    peak = std::max(peak, used);
  }
  return peak;
}

// How often the exact plan uploads `component` in the second of two requests.
std::size_t steady_uploads(const std::vector<PolicyState::Entry>& entries,
                           const std::vector<std::size_t>& calls, std::uint64_t budget,
                           std::size_t component) {
  const auto two = twice(calls);
  const auto plan = plan_evictions(entries, std::vector<bool>(entries.size(), false), two, budget);
  std::size_t n = 0;
  for (std::size_t k = calls.size(); k < two.size(); ++k)
    n += two[k] == component && plan.uploaded[k];
  return n;
}

std::string uploads_text(std::size_t n) {
  if (n == 0) return "stays resident";
  if (n == 1) return "uploaded once per request";
  return detail::concat("uploaded ", n, "× per request");
}

ModeEstimate estimate(PolicyKind kind, const std::vector<ComponentSize>& components,
                      std::uint64_t budget, std::size_t prefetch,
                      const std::vector<std::size_t>& calls) {
  ModeEstimate m;
  m.kind = kind;
  std::uint64_t largest_group = 0;
  for (const auto& c : components) largest_group = std::max(largest_group, c.largest_group);
  try {
    m.bytes_per_request = bytes_per_request(kind, components, budget, prefetch, calls);
    switch (kind) {
      case PolicyKind::all_resident:
        m.planned_peak_bytes = total_bytes(components);
        break;
      case PolicyKind::model_level:
        m.planned_peak_bytes = model_level_peak(components) + 2 * largest_group;
        OMNI_CHECK(m.planned_peak_bytes <= budget, ConfigError, "streamed swaps need ",
                   format_bytes(m.planned_peak_bytes), " (the model-level peak + 2 × ",
                   format_bytes(largest_group), "), over the budget of ", format_bytes(budget));
        break;
      case PolicyKind::budget:
        m.planned_peak_bytes = plan_peak(whole_entries(components, false), twice(calls), budget);
        break;
      case PolicyKind::layerwise: {
        const auto window = window_bytes(components, prefetch);
        m.planned_peak_bytes =
            window + plan_peak(whole_entries(components, true), twice(calls), budget - window);
        break;
      }
    }
    m.runs = true;
  } catch (const ConfigError& e) {
    m.runs = false;
    m.why_not = e.what();
  }
  return m;
}

}  // namespace

std::vector<ModeEstimate> estimate_modes(const std::vector<ComponentSize>& components,
                                         std::uint64_t budget, std::size_t prefetch,
                                         const std::vector<std::size_t>& calls) {
  std::vector<ModeEstimate> out;
  for (auto kind : {PolicyKind::all_resident, PolicyKind::model_level, PolicyKind::budget,
                    PolicyKind::layerwise})
    out.push_back(estimate(kind, components, budget, prefetch, calls));
  return out;
}

std::string device_placement(PolicyKind kind, const std::vector<ComponentSize>& components,
                             std::size_t component, std::uint64_t budget, std::size_t prefetch,
                             const std::vector<std::size_t>& calls) {
  const auto& c = components.at(component);
  const bool called = std::find(calls.begin(), calls.end(), component) != calls.end();
  switch (kind) {
    case PolicyKind::all_resident:
      return "resident";
    case PolicyKind::model_level:
      if (c.role == Role::vae || c.role == Role::resident) return "resident";
      return called ? "uploaded once per request" : "not called";
    case PolicyKind::budget:
      if (c.role == Role::resident) return "resident";
      return uploads_text(
          steady_uploads(whole_entries(components, false), calls, budget, component));
    case PolicyKind::layerwise: {
      const auto window = window_bytes(components, prefetch);
      if (c.role == Role::dit)
        return detail::concat("blocks stream at every call; ",
                              format_bytes(c.bytes - c.block_bytes),
                              " outside the blocks resident");
      if (c.role == Role::resident) return "resident";
      return uploads_text(
          steady_uploads(whole_entries(components, true), calls, budget - window, component));
    }
  }
  return "";
}

}  // namespace omni::offload
