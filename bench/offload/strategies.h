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
  virtual void begin_request() {}
  // The phase boundary before component `index` of the profile runs: what
  // the strategy moves there. May return before the copies finish.
  virtual void enter(std::size_t index) = 0;
  // After the request's last component.
  virtual void end_request() {}
  // Transfer time of the last request measured on the device (events), when
  // the strategy keeps such a record.
  virtual std::optional<double> device_timed_transfer_seconds() { return std::nullopt; }
  // Host memory the strategy holds for weights now, and at most so far.
  virtual HostBytes host_bytes() = 0;
  virtual HostBytes host_peak() = 0;
  // Removes hooks and drops every buffer the strategy owns; never throws.
  virtual void teardown() noexcept = 0;
};

std::unique_ptr<Strategy> make_omni_strategy(device::Device& device);
std::unique_ptr<Strategy> make_copy_back_strategy(device::Device& device);
std::unique_ptr<Strategy> make_accelerate_strategy(device::Device& device);

}  // namespace omni::bench
