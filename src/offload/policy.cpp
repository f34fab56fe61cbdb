#include "omni/offload/policy.h"

#include <algorithm>
#include <limits>

#include "omni/device/device.h"
#include "omni/error.h"

namespace omni::offload {

std::string_view to_string(PolicyKind kind) {
  switch (kind) {
    case PolicyKind::model_level:
      return "model-level";
    case PolicyKind::budget:
      return "budget";
    case PolicyKind::layerwise:
      return "layerwise";
    case PolicyKind::all_resident:
      return "all-resident";
  }
  return "?";
}

namespace {

using Entries = std::vector<PolicyState::Entry>;

// The exact search handles schedules naming at most this many swappable
// components (3^8 eviction choices per call at worst); past it, Belady.
constexpr std::size_t kExactLimit = 8;

std::uint64_t fixed_bytes(const Entries& components) {
  std::uint64_t fixed = 0;
  for (const auto& c : components)
    if (!c.swappable) fixed += c.bytes;
  return fixed;
}

void check_fits(const Entries& components, std::size_t index, std::uint64_t fixed,
                std::uint64_t budget) {
  const auto& c = components[index];
  OMNI_CHECK(!c.swappable || c.bytes + fixed <= budget, ConfigError, to_string(c.role),
             " component '", c.name, "' (", device::format_bytes(c.bytes),
             ") does not fit the device memory budget of ", device::format_bytes(budget),
             " beside ", device::format_bytes(fixed),
             " of modules that never leave; raise --device-memory-budget");
}

// Consecutive calls of one component cost nothing after the first.
std::vector<std::size_t> distinct_runs(const std::vector<std::size_t>& calls) {
  std::vector<std::size_t> out;
  for (auto c : calls)
    if (out.empty() || out.back() != c) out.push_back(c);
  return out;
}

bool contains(const std::vector<std::size_t>& v, std::size_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// Expands a compressed plan back to one entry per original call.
EvictionPlan expand(const EvictionPlan& runs, const std::vector<std::size_t>& calls) {
  EvictionPlan out;
  out.upload_bytes = runs.upload_bytes;
  std::size_t run = 0;
  for (std::size_t k = 0; k < calls.size(); ++k) {
    const bool first = k == 0 || calls[k] != calls[k - 1];
    if (first && k > 0) ++run;
    out.evicted.push_back(first ? runs.evicted[run] : std::vector<std::size_t>{});
    out.uploaded.push_back(first && runs.uploaded[run]);
  }
  return out;
}

// The exact search: states are sets of resident swappable components (bit
// masks over `ids`), one layer per call, keeping the cheapest way into each.
EvictionPlan exact_plan(const Entries& components, const std::vector<bool>& resident,
                        const std::vector<std::size_t>& calls, std::uint64_t budget,
                        const std::vector<std::size_t>& pinned, bool allow_pinned) {
  std::vector<std::size_t> ids;  // swappable components, bit k = ids[k]
  std::vector<int> bit_of(components.size(), -1);
  for (std::size_t i = 0; i < components.size(); ++i)
    if (components[i].swappable) {
      bit_of[i] = static_cast<int>(ids.size());
      ids.push_back(i);
    }
  const std::size_t states = std::size_t{1} << ids.size();
  std::vector<std::uint64_t> size(states, 0);
  for (std::size_t m = 1; m < states; ++m) {
    const auto low = static_cast<std::size_t>(__builtin_ctzll(m));
    size[m] = size[m & (m - 1)] + components[ids[low]].bytes;
  }
  const std::uint64_t fixed = fixed_bytes(components);
  std::uint32_t start = 0, pinned_mask = 0;
  for (std::size_t i = 0; i < components.size(); ++i) {
    if (bit_of[i] < 0) continue;
    if (resident[i]) start |= 1u << bit_of[i];
    if (!allow_pinned && contains(pinned, i)) pinned_mask |= 1u << bit_of[i];
  }
  constexpr auto kNone = std::numeric_limits<std::uint64_t>::max();
  struct Back {
    std::uint32_t from = 0, evicted = 0;
    bool uploaded = false;
  };
  std::vector<std::uint64_t> cost(states, kNone), next(states, kNone);
  std::vector<std::vector<Back>> back(calls.size(), std::vector<Back>(states));
  cost[start] = 0;
  for (std::size_t k = 0; k < calls.size(); ++k) {
    std::fill(next.begin(), next.end(), kNone);
    const auto x = calls[k];
    const bool swappable = bit_of[x] >= 0;
    const std::uint32_t xbit = swappable ? 1u << bit_of[x] : 0;
    auto relax = [&](std::uint32_t from, std::uint32_t to, std::uint32_t evicted, std::uint64_t c) {
      if (c < next[to]) {
        next[to] = c;
        back[k][to] = {from, evicted, swappable && !(from & xbit)};
      }
    };
    for (std::uint32_t m = 0; m < states; ++m) {
      if (cost[m] == kNone) continue;
      // A target already (partly) on the device costs nothing more, but the
      // state must still fit: a start state may not (a component rolling in
      // beside the one it replaces counts whole).
      const bool present = (m & xbit) != 0;
      if (!swappable || (present && size[m] + fixed <= budget)) {
        relax(m, m, 0, cost[m]);
        continue;
      }
      const std::uint32_t avail = m & ~xbit & ~(k == 0 ? pinned_mask : 0u);
      const auto upload = present ? 0 : components[x].bytes;
      for (std::uint32_t e = 0;; e = (e - avail) & avail) {  // submasks, ascending
        const std::uint32_t to = (m & ~e) | xbit;
        if (size[to] + fixed <= budget) relax(m, to, e, cost[m] + upload);
        if (e == avail) break;
      }
    }
    std::swap(cost, next);
  }
  // The cheapest end; ties keep the most bytes resident (cheapest beyond the schedule).
  std::uint32_t best = 0;
  bool found = false;
  for (std::uint32_t m = 0; m < states; ++m) {
    if (cost[m] == kNone) continue;
    if (!found || cost[m] < cost[best] || (cost[m] == cost[best] && size[m] > size[best])) {
      best = m;
      found = true;
    }
  }
  EvictionPlan plan;
  if (!found) return plan;  // only when pinned components were kept: the caller retries
  plan.upload_bytes = cost[best];
  plan.evicted.resize(calls.size());
  plan.uploaded.resize(calls.size());
  for (std::size_t k = calls.size(); k-- > 0;) {
    const auto& b = back[k][best];
    for (std::size_t bit = 0; bit < ids.size(); ++bit)
      if (b.evicted & (1u << bit)) plan.evicted[k].push_back(ids[bit]);
    plan.uploaded[k] = b.uploaded;
    best = b.from;
  }
  return plan;
}

EvictionPlan belady_plan(const Entries& components, std::vector<bool> resident,
                         const std::vector<std::size_t>& calls, std::uint64_t budget,
                         const std::vector<std::size_t>& pinned) {
  const std::uint64_t fixed = fixed_bytes(components);
  EvictionPlan plan;
  plan.evicted.resize(calls.size());
  plan.uploaded.resize(calls.size());
  for (std::size_t k = 0; k < calls.size(); ++k) {
    const auto x = calls[k];
    auto used = [&] {
      std::uint64_t bytes = fixed;
      for (std::size_t i = 0; i < components.size(); ++i)
        if (resident[i] && components[i].swappable) bytes += components[i].bytes;
      return bytes;
    };
    auto next_use = [&](std::size_t c) {
      for (std::size_t j = k + 1; j < calls.size(); ++j)
        if (calls[j] == c) return j;
      return calls.size();
    };
    if (!components[x].swappable) continue;
    const bool present = resident[x];
    if (present && used() <= budget) continue;
    std::vector<std::size_t> candidates;
    for (std::size_t i = 0; i < components.size(); ++i)
      if (i != x && resident[i] && components[i].swappable) candidates.push_back(i);
    // Farthest next use first, then the larger; pinned ones last of all.
    std::stable_sort(candidates.begin(), candidates.end(), [&](std::size_t a, std::size_t b) {
      const bool pa = k == 0 && contains(pinned, a), pb = k == 0 && contains(pinned, b);
      if (pa != pb) return pb;
      const auto na = next_use(a), nb = next_use(b);
      if (na != nb) return na > nb;
      return components[a].bytes > components[b].bytes;
    });
    for (auto c : candidates) {
      if (used() + (present ? 0 : components[x].bytes) <= budget) break;
      resident[c] = false;
      plan.evicted[k].push_back(c);
    }
    resident[x] = true;
    if (present) continue;
    plan.uploaded[k] = true;
    plan.upload_bytes += components[x].bytes;
  }
  return plan;
}

void check_plan_inputs(const Entries& components, const std::vector<bool>& resident,
                       const std::vector<std::size_t>& calls, std::uint64_t budget) {
  OMNI_INTERNAL_ASSERT(resident.size() == components.size());
  const auto fixed = fixed_bytes(components);
  for (auto c : calls) {
    OMNI_INTERNAL_ASSERT(c < components.size());
    check_fits(components, c, fixed, budget);
  }
}

}  // namespace

EvictionPlan plan_evictions(const Entries& components, const std::vector<bool>& resident,
                            const std::vector<std::size_t>& calls, std::uint64_t budget,
                            const std::vector<std::size_t>& pinned) {
  check_plan_inputs(components, resident, calls, budget);
  const auto runs = distinct_runs(calls);
  std::size_t swappable = 0;
  for (const auto& c : components) swappable += c.swappable;
  if (swappable > kExactLimit)
    return plan_evictions_belady(components, resident, calls, budget, pinned);
  auto plan = exact_plan(components, resident, runs, budget, pinned, /*allow_pinned=*/false);
  if (plan.evicted.empty() && !runs.empty())
    plan = exact_plan(components, resident, runs, budget, pinned, /*allow_pinned=*/true);
  return expand(plan, calls);
}

EvictionPlan plan_evictions_belady(const Entries& components, const std::vector<bool>& resident,
                                   const std::vector<std::size_t>& calls, std::uint64_t budget,
                                   const std::vector<std::size_t>& pinned) {
  check_plan_inputs(components, resident, calls, budget);
  return belady_plan(components, resident, calls, budget, pinned);
}

namespace {

class ModelLevelPolicy final : public ResidencyPolicy {
 public:
  PolicyKind kind() const override { return PolicyKind::model_level; }
  bool swappable(Role role) const override {
    return role == Role::dit || role == Role::encoder || role == Role::split;
  }
  std::vector<std::size_t> evictions(const PolicyState& state, std::size_t target,
                                     const std::vector<std::size_t>&) const override {
    std::vector<std::size_t> out;
    const auto role = state.components[target].role;
    for (std::size_t i = 0; i < state.components.size(); ++i) {
      const auto& other = state.components[i];
      if (i != target && other.resident_bytes > 0 && conflicts(role, other.role)) out.push_back(i);
    }
    return out;
  }

 private:
  static bool conflicts(Role target, Role other) {
    return (target == Role::dit && (other == Role::encoder || other == Role::dit)) ||
           (target == Role::encoder && other == Role::dit) ||
           (target == Role::split && other == Role::split);
  }
};

class BudgetPolicy : public ResidencyPolicy {
 public:
  PolicyKind kind() const override { return PolicyKind::budget; }
  bool swappable(Role role) const override { return role != Role::resident; }
  std::vector<std::size_t> evictions(const PolicyState& state, std::size_t target,
                                     const std::vector<std::size_t>& pinned) const override {
    const auto& components = state.components;
    std::uint64_t used = 0;
    std::vector<bool> resident(components.size());
    for (std::size_t i = 0; i < components.size(); ++i) {
      resident[i] = components[i].resident_bytes > 0;
      used += resident[i] ? components[i].bytes : 0;
    }
    const auto& t = components[target];
    if (resident[target]) used -= t.bytes;
    if (used + t.bytes <= state.budget_bytes) return {};  // it fits: nothing leaves
    std::vector<std::size_t> calls{target};
    calls.insert(calls.end(), state.upcoming.begin(), state.upcoming.end());
    const auto plan = plan_evictions(components, resident, calls, state.budget_bytes, pinned);
    // No way to fit at all: nothing to evict; the ledger refuses the upload, naming the budget.
    return plan.evicted.empty() ? std::vector<std::size_t>{} : plan.evicted.front();
  }
  void check_plan(const std::vector<PolicyState::Entry>& components,
                  std::uint64_t budget_bytes) const override {
    const auto fixed = fixed_bytes(components);
    OMNI_CHECK(fixed <= budget_bytes, ConfigError, "the modules that never leave the device take ",
               device::format_bytes(fixed), ", more than the device memory budget of ",
               device::format_bytes(budget_bytes));
    for (std::size_t i = 0; i < components.size(); ++i)
      check_fits(components, i, fixed, budget_bytes);
  }
};

// The backend hands it the whole components, with each DiT's non-block
// tensors as fixed entries and the budget less the block window.
class LayerwisePolicy final : public BudgetPolicy {
 public:
  PolicyKind kind() const override { return PolicyKind::layerwise; }
  bool streams_blocks(Role role) const override { return role == Role::dit; }
};

class AllResidentPolicy final : public ResidencyPolicy {
 public:
  PolicyKind kind() const override { return PolicyKind::all_resident; }
  bool swappable(Role) const override { return false; }
  std::vector<std::size_t> evictions(const PolicyState&, std::size_t,
                                     const std::vector<std::size_t>&) const override {
    return {};
  }
};

}  // namespace

std::unique_ptr<ResidencyPolicy> make_policy(PolicyKind kind) {
  switch (kind) {
    case PolicyKind::model_level:
      return std::make_unique<ModelLevelPolicy>();
    case PolicyKind::budget:
      return std::make_unique<BudgetPolicy>();
    case PolicyKind::layerwise:
      return std::make_unique<LayerwisePolicy>();
    case PolicyKind::all_resident:
      return std::make_unique<AllResidentPolicy>();
  }
  OMNI_INTERNAL_ASSERT(false, "unknown policy kind");
  return nullptr;
}

}  // namespace omni::offload
