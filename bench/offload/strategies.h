// The movers `omni bench offload` puts side by side, all driven through the
// same Device interface (and so the same meter):
//
//   omni        ModelLevelOffloadBackend: pre-forward hooks on the module
//               tree, one pinned home per tensor made once at enable, uploads
//               on the transfer stream, offload = drop the device copy.
//   copy-back   vllm-omni's model-level path (SequentialOffloadHook, upstream
//               eb28075): weights load into pageable CPU memory; enable moves
//               the encoders (blocking) and the VAE (non_blocking) to the
//               device; before a DiT runs the encoders and the other DiT are
//               copied back per tensor into fresh page-locked memory from
//               torch's caching host allocator (power-of-two blocks; a new
//               block is pinned on the spot), then empty_cache(); the incoming
//               module is uploaded per tensor with non_blocking=False, so each
//               tensor waits for its copy; then synchronize(). The first
//               upload of each DiT reads the pageable loader memory.
//   accelerate  diffusers' enable_model_cpu_offload (accelerate CpuOffload
//               hooks chained text_encoder→transformer→transformer_2→vae):
//               before a model runs the previous one goes `.to("cpu")` (fresh
//               pageable memory, blocking) and clear_device_cache(), then
//               `.to(device)` from pageable memory, blocking per tensor; at
//               the end of each call maybe_free_model_hooks() moves whatever
//               is left (the VAE) back to the CPU.
//
// Threading: one thread drives a strategy, its pipeline and its device.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench/offload/profile_pipeline.h"
#include "bench/offload/weight_profile.h"
#include "omni/device/device.h"

namespace omni::bench {

struct HostBytes {
  std::uint64_t pinned = 0;    // page-locked host memory held for weights
  std::uint64_t pageable = 0;  // pageable host memory held for weights
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string name() const = 0;
  // How the loaded weights must arrive (Note in profile_pipeline.h).
  virtual WeightStorage storage() const = 0;
  // Everything done before the first request: the cold start.
  virtual void enable(ProfilePipeline& pipeline, const WeightProfile& profile) = 0;
  // `calls`: the component calls of this request and of the one queued
  // behind it (empty when there is none), for strategies that read ahead.
  virtual void begin_request(const std::vector<std::string>& calls = {},
                             const std::vector<std::string>& next_calls = {}) {}
  // The phase boundary before component `index` of the profile runs: what
  // the strategy moves there. May return before the copies finish.
  virtual void enter(std::size_t index) = 0;
  // A call of component `index` (modeled runs make several per component in
  // a row): the hooks a forward fires. By default the phase boundary, once.
  virtual void call(std::size_t index) {
    if (index != last_call_) enter(index);
    last_call_ = index;
  }
  // Whether enter() returns with copies still in flight that compute will
  // wait for block by block (so a swap's time is not enter + synchronize).
  virtual bool streams() const { return false; }
  // Transfer time compute waited for in the last request, when the strategy
  // records it (Note [Exposed and hidden transfer]).
  virtual std::optional<double> exposed_transfer_seconds() { return std::nullopt; }
  // After the request's last component.
  virtual void end_request() { last_call_ = static_cast<std::size_t>(-1); }
  // Transfer time of the last request measured on the device (events), when
  // the strategy keeps such a record.
  virtual std::optional<double> device_timed_transfer_seconds() { return std::nullopt; }
  // Host memory the strategy holds for weights now, and at most so far.
  virtual HostBytes host_bytes() = 0;
  virtual HostBytes host_peak() = 0;
  // Removes hooks and drops every buffer the strategy owns; never throws.
  virtual void teardown() noexcept = 0;

 private:
  std::size_t last_call_ = static_cast<std::size_t>(-1);
};

// omni: ModelLevelOffloadBackend with whole-component swaps (the seed's
// strict mode); omni-streamed: the same with streaming (Note [Streaming
// model-level offload]), `device_budget` bytes of weights at most (capacity
// minus the reserve); all-resident: every component uploaded once at enable.
enum class OmniMode { whole_components, streamed, budget, layerwise, all_resident };
std::unique_ptr<Strategy> make_omni_strategy(device::Device& device, OmniMode mode,
                                             std::uint64_t device_budget = 0);
std::unique_ptr<Strategy> make_copy_back_strategy(device::Device& device);
std::unique_ptr<Strategy> make_accelerate_strategy(device::Device& device);

}  // namespace omni::bench
