// Denoising schedulers: the interface a pipeline's loop steps through, and the
// factory that builds one from a diffusers scheduler config.
//
// Usage (one scheduler per generation; not thread-safe, call from one thread):
//
//   auto scheduler = omni::schedulers::make_scheduler(omni::io::read_json_file(path), path);
//   scheduler->set_timesteps(steps);
//   for (int64_t i = 0; i < scheduler->timesteps().size(0); ++i) {
//     double t = scheduler->timesteps()[i].item<double>();
//     latents = scheduler->step(model(latents, t), t, latents);
//   }
//
// Note [Scheduler parity with diffusers]
// Every number follows diffusers (commit 58eb52c0) operation by operation: the
// schedules are built in float64 exactly as numpy does and rounded to float32
// where the reference rounds; the per-step coefficients are float32 scalars,
// as the reference's float32 `sigmas` make them, and multiply tensors of any
// dtype by the usual type promotion. A float64 run therefore equals the
// reference's float64 run, including the reference's own float32 roundings.
#pragma once

#include <torch/types.h>

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace omni::schedulers {

// Note [First step position]
// Without a begin index, the first step() looks its timestep up as diffusers'
// index_for_timestep does: when the timestep occurs more than once it takes
// the second occurrence. Integer UniPC schedules repeat 999 at high shift and
// many steps (flow_shift 12: from 100 steps on), so a loop over timesteps()
// that does not call set_begin_index(0) would skip the first level there,
// exactly as diffusers would.
class Scheduler {
 public:
  Scheduler() = default;
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;
  virtual ~Scheduler() = default;

  // The diffusers class this scheduler reproduces, e.g. "UniPCMultistepScheduler".
  virtual std::string class_name() const = 0;

  // Builds the schedule for `num_inference_steps` (≥ 1, else InvalidRequest)
  // and resets every piece of multistep state.
  virtual void set_timesteps(int num_inference_steps) = 0;

  // The schedule, on the CPU: N entries, float32 (FlowMatch) or int64 (UniPC).
  // Empty before set_timesteps().
  virtual const torch::Tensor& timesteps() const = 0;

  // float32 noise levels on the CPU, N + 1 entries; the last is the final
  // level (0, or 1 for inverted FlowMatch sigmas).
  virtual const torch::Tensor& sigmas() const = 0;

  // Makes the next step() start at timesteps()[begin_index] whatever timestep
  // it is given; cleared by set_timesteps(). Pipelines call
  // set_begin_index(0) after set_timesteps(), as diffusers' WanPipeline does
  // (Note [First step position]). InvalidRequest when out of range.
  virtual void set_begin_index(int begin_index) = 0;

  // One denoising step from timesteps()[k] to the next level; returns the
  // previous sample on the device of `sample`. Synchronous with respect to
  // the caller's stream. The first call after set_timesteps() starts at the
  // begin index, or else finds k from `timestep`; later calls advance by one
  // and ignore it. InvalidRequest when called before set_timesteps(), past
  // the last timestep, with a timestep that is not in the schedule
  // (FlowMatch) or with shapes that differ.
  // The result dtype is the reference's: see each implementation.
  virtual torch::Tensor step(const torch::Tensor& model_output, double timestep,
                             const torch::Tensor& sample) = 0;

  virtual int num_train_timesteps() const = 0;

  // The shift the schedule uses (FlowMatch `shift`, UniPC `flow_shift`).
  virtual double shift() const = 0;
};

// Values that replace fields of the config, as diffusers'
// `from_config(config, **kwargs)` does: a `--shift` on the command line
// rebuilds the scheduler with that shift, exactly as if the file said so.
struct SchedulerOverrides {
  std::optional<double> shift;  // FlowMatch `shift`, UniPC `flow_shift`
};

// Builds the scheduler named by config["_class_name"] from a diffusers
// scheduler config (scheduler_config.json); `source` names it in messages.
// ConfigError naming the field for an unknown field, a wrong type, or a
// value this implementation does not support; ConfigError listing
// known_scheduler_classes() for an unknown class.
std::unique_ptr<Scheduler> make_scheduler(const nlohmann::json& config, const std::string& source,
                                          const SchedulerOverrides& overrides = {});

// The `_class_name` values make_scheduler() accepts, sorted.
std::vector<std::string> known_scheduler_classes();

}  // namespace omni::schedulers
