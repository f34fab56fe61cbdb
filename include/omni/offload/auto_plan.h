// Choosing an offload mode from the sizes and the budget (--offload auto,
// `omni inspect --device-memory-budget`).
//
//   auto choice = omni::offload::choose_offload(sizes, budget, /*prefetch_blocks=*/1, calls);
//   std::cout << to_string(choice.kind) << ": " << choice.why << "\n";
//
// Note [Choosing an offload mode]
// From the cheapest to run to the one that runs anywhere:
// 1. all-resident when every weight fits the budget: nothing moves after
//    the first upload.
// 2. Model-level streamed when its planned peak + 2 × the largest block
//    group fits (the rolling swap's margin), or the budget policy when that
//    also fits and moves fewer bytes per request (it keeps what fits, such
//    as the encoder beside an expert, across phases and requests).
// 3. The budget policy when the largest component fits beside what never
//    leaves but the rolling margin does not.
// 4. Layerwise when a DiT does not fit: its blocks stream through every
//    call, K + 1 at a time.
// Otherwise nothing runs: ConfigError naming the sizes. Bytes per request
// are the steady state (the second of two requests) of the policy's exact
// eviction plan over the request's calls (Note [Residency policies]).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "omni/device/device.h"
#include "omni/offload/backend.h"
#include "omni/offload/components.h"
#include "omni/offload/policy.h"

namespace omni::offload {

struct ComponentSize {
  std::string name;
  Role role = Role::resident;
  std::uint64_t bytes = 0;
  std::uint64_t block_bytes = 0;    // of its blocks.N groups
  std::uint64_t largest_block = 0;  // the largest of them
  std::uint64_t largest_group = 0;  // the largest block group of any kind (Note [Block groups])
};

// The device bytes weights may hold: OffloadOptions::device_memory_budget,
// else the device's memory (sim: capacity; cuda: free memory plus what this
// process's allocator holds, its cache included: M3 of the GPU review)
// minus the reserve (default 0 on sim, max(20 %, 4 GiB) on cuda); 0 when the
// device does not say.
std::uint64_t device_budget(const device::Device& device, const OffloadOptions& options);

// A block of a stack: a tensor group named like `blocks.N`.
bool is_block_group(const std::string& group);
// The sizes of `module`'s weights as `name` with `role`, from the tensors alone.
ComponentSize measure_component(const std::string& name, Role role, torch::nn::Module& module);

// The same from a checkpoint's tensor names and (loaded) byte sizes, before
// anything loads: Note [Block groups] read off the names — a group is the
// shallowest path that holds tensors of its own or ends in an index.
ComponentSize measure_named_tensors(
    const std::string& name, Role role,
    const std::vector<std::pair<std::string, std::uint64_t>>& tensor_bytes);

struct OffloadChoice {
  PolicyKind kind = PolicyKind::all_resident;
  bool streaming = true;           // model-level: streamed swaps
  std::string why;                 // one sentence, for people
  std::uint64_t budget_bytes = 0;  // the budget it was chosen under
  std::uint64_t planned_peak_bytes = 0;
  std::uint64_t bytes_per_request = 0;  // uploaded per request, steady state
};

// `calls`: one request's component calls (indices into `components`).
// ConfigError when nothing fits the budget.
OffloadChoice choose_offload(const std::vector<ComponentSize>& components,
                             std::uint64_t budget_bytes, std::size_t prefetch_blocks,
                             const std::vector<std::size_t>& calls);

// The bytes per request of `kind` under the budget (steady state), for
// `omni inspect`'s table of modes; ConfigError when it cannot run.
std::uint64_t bytes_per_request(PolicyKind kind, const std::vector<ComponentSize>& components,
                                std::uint64_t budget_bytes, std::size_t prefetch_blocks,
                                const std::vector<std::size_t>& calls);

// What each mode would do under the budget, for `omni inspect
// --device-memory-budget`: whether it runs, its planned peak of weight bytes
// (model-level streamed: the planned peak + 2 × the largest block group;
// budget and layerwise: the most their exact plan holds at once) and the
// bytes it uploads per request in the steady state.
struct ModeEstimate {
  PolicyKind kind = PolicyKind::all_resident;
  bool runs = false;
  std::uint64_t planned_peak_bytes = 0;
  std::uint64_t bytes_per_request = 0;
  std::string why_not;  // when it does not run
};
std::vector<ModeEstimate> estimate_modes(const std::vector<ComponentSize>& components,
                                         std::uint64_t budget_bytes, std::size_t prefetch_blocks,
                                         const std::vector<std::size_t>& calls);

// Where `component`'s weights spend a request under `kind` (steady state), in
// a few words: "resident", "uploaded once per request", "blocks stream", ….
std::string device_placement(PolicyKind kind, const std::vector<ComponentSize>& components,
                             std::size_t component, std::uint64_t budget_bytes,
                             std::size_t prefetch_blocks, const std::vector<std::size_t>& calls);

}  // namespace omni::offload
