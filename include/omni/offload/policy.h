// Residency policies: which components may leave the device, and which must
// leave before a component runs. They decide; the backend moves (Mover),
// accounts (OffloadRecorder) and stores residency (ResidencyLedger).
//
//   auto policy = make_policy(PolicyKind::budget);
//   auto out = policy->evictions(state, target);  // indices into state.components
//
// Note [Residency policies]
// - model-level (--enable-cpu-offload, the seed's rules): encoders and DiTs
//   exclude each other, DiTs exclude DiTs, split components each other. The
//   VAE and resident modules stay. The ledger checks those rules.
// - budget (--device-memory-budget): everything but resident modules may
//   move, and a component leaves only when the budget forces it. Which ones
//   leave is chosen over the known schedule (the running request's calls and
//   the queued ones) to upload the fewest bytes: farthest next use first
//   (Belady) is optimal only when all components are the same size, so the
//   policy searches the eviction sets exactly (a schedule names a handful of
//   components; the search is over subsets of them) and falls back to
//   Belady past kExactLimit components. The ledger checks the budget.
// - layerwise (--enable-layerwise-offload): the budget policy for whole
//   components, except that a DiT is never resident whole: its non-block
//   tensors stay on the device and its blocks stream through every call, K
//   ahead of compute (OffloadOptions::prefetch_blocks). The window of K + 1
//   blocks is set aside from the budget; what is left is what the whole
//   components share.
// - all-resident: nothing moves.
// The policy never evicts a component the caller pins (one whose forward is
// running) when another choice fits; when none does, it names it and the
// backend refuses (ResidencyViolation).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "omni/offload/components.h"

namespace omni::offload {

enum class PolicyKind { model_level, budget, layerwise, all_resident };
std::string_view to_string(PolicyKind kind);

// What a policy sees: the components as the ledger has them, and the calls
// that follow the one being decided.
struct PolicyState {
  struct Entry {
    std::string name;
    Role role;
    std::uint64_t bytes = 0;           // all of its weights
    std::uint64_t resident_bytes = 0;  // on the device now
    bool swappable = false;
  };
  std::vector<Entry> components;
  // Component indices of the calls after the one being decided, in order.
  std::vector<std::size_t> upcoming;
  // Device bytes weights may hold (budget policy); 0: unlimited.
  std::uint64_t budget_bytes = 0;
};

class ResidencyPolicy {
 public:
  virtual ~ResidencyPolicy() = default;
  virtual PolicyKind kind() const = 0;
  // Whether components of this role ever leave the device.
  virtual bool swappable(Role role) const = 0;
  // Whether components of this role stream block by block through every
  // call instead of being made resident whole (layerwise DiTs).
  virtual bool streams_blocks(Role role) const {
    (void)role;
    return false;
  }
  // The components (indices, none of them `target`) that must leave the
  // device before `target` is made resident. `pinned` are not chosen when
  // another set fits.
  virtual std::vector<std::size_t> evictions(const PolicyState& state, std::size_t target,
                                             const std::vector<std::size_t>& pinned) const = 0;
  // Before anything moves: ConfigError when `components` cannot run under
  // `budget_bytes` at all (budget policy: a component that does not fit
  // beside those that never leave).
  virtual void check_plan(const std::vector<PolicyState::Entry>& components,
                          std::uint64_t budget_bytes) const {
    (void)components;
    (void)budget_bytes;
  }
};

std::unique_ptr<ResidencyPolicy> make_policy(PolicyKind kind);

// The budget policy's choice, exposed for tests and `omni inspect`: the
// fewest bytes uploaded to run `calls` (component indices) in order under
// `budget_bytes`, starting with `resident` on the device, evicting whole
// components (never those with swappable false). Exact (a search over
// subsets); ConfigError when a call's component cannot fit at all.
struct EvictionPlan {
  std::uint64_t upload_bytes = 0;
  // Per call: the components evicted before it, and whether it uploaded.
  std::vector<std::vector<std::size_t>> evicted;
  std::vector<bool> uploaded;
};
EvictionPlan plan_evictions(const std::vector<PolicyState::Entry>& components,
                            const std::vector<bool>& resident,
                            const std::vector<std::size_t>& calls, std::uint64_t budget_bytes,
                            const std::vector<std::size_t>& pinned = {});
// The same with farthest-next-use-first (Belady), ties to the larger.
EvictionPlan plan_evictions_belady(const std::vector<PolicyState::Entry>& components,
                                   const std::vector<bool>& resident,
                                   const std::vector<std::size_t>& calls,
                                   std::uint64_t budget_bytes,
                                   const std::vector<std::size_t>& pinned = {});

}  // namespace omni::offload
