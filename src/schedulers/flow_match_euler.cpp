#include "omni/schedulers/flow_match_euler.h"

#include <cmath>
#include <utility>

#include "omni/error.h"
#include "omni/io/json_config.h"
#include "schedulers/config_fields.h"
#include "schedulers/flow_sigmas.h"

namespace omni::schedulers {

FlowMatchEulerConfig FlowMatchEulerConfig::from_json(const nlohmann::json& config,
                                                     const std::string& source) {
  io::ConfigReader reader(config, source);
  FlowMatchEulerConfig out;
  out.num_train_timesteps = reader.optional<int>("num_train_timesteps", out.num_train_timesteps);
  out.shift = reader.optional<double>("shift", out.shift);
  out.invert_sigmas = reader.optional<bool>("invert_sigmas", out.invert_sigmas);
  out.shift_terminal = reader.nullable<double>("shift_terminal");
  if (out.shift_terminal == 0.0) out.shift_terminal.reset();

  internal::require_flag(reader, "use_dynamic_shifting", false,
                         "resolution-dependent shifting needs a per-request mu");
  // Only the pipelines' mu computation for dynamic shifting reads these.
  internal::check_type<double>(reader, "base_shift");
  internal::check_type<double>(reader, "max_shift");
  internal::check_type<int>(reader, "base_image_seq_len");
  internal::check_type<int>(reader, "max_image_seq_len");
  internal::read_choice(reader, "time_shift_type", "exponential", {"exponential", "linear"});
  internal::require_flag(reader, "use_karras_sigmas", false, "Karras sigmas are not implemented");
  internal::require_flag(reader, "use_exponential_sigmas", false,
                         "exponential sigmas are not implemented");
  internal::require_flag(reader, "use_beta_sigmas", false, "beta sigmas are not implemented");
  internal::require_flag(reader, "stochastic_sampling", false,
                         "stochastic sampling is not implemented");
  reader.finish();
  out.validate(source);
  return out;
}

void FlowMatchEulerConfig::validate(const std::string& source) const {
  OMNI_CHECK(num_train_timesteps >= 1, ConfigError, source,
             ": field 'num_train_timesteps' = ", num_train_timesteps, " must be at least 1");
  OMNI_CHECK(std::isfinite(shift) && shift > 0.0, ConfigError, source, ": field 'shift' = ", shift,
             " must be a positive number");
  OMNI_CHECK(!shift_terminal || (std::isfinite(*shift_terminal) && *shift_terminal != 1.0),
             ConfigError, source, ": field 'shift_terminal' = ", shift_terminal.value_or(0.0),
             " must be a number other than 1");
}

// Note [FlowMatch sigma_min is shifted twice]
// diffusers shifts the training sigmas in its constructor (in float32) and
// keeps their ends as sigma_max / sigma_min; set_timesteps() spaces the
// timesteps between those ends and shifts again. So the last sigma is the
// twice-shifted 1/num_train_timesteps (shift 3: 0.001 → 0.002994 → 0.008929),
// while the first stays 1 since the shift maps 1 to 1.
FlowMatchEulerScheduler::FlowMatchEulerScheduler(FlowMatchEulerConfig config,
                                                 const std::string& source)
    : config_(std::move(config)) {
  config_.validate(source);
  // The constructor's float32 arithmetic (torch ops on a float32 tensor with
  // Python scalars, which round to float32): σ = t / T, then the shift.
  const float shift = static_cast<float>(config_.shift);
  const float shift_minus_one = static_cast<float>(config_.shift - 1.0);
  const auto shifted = [&](float t) {
    const float s = t / static_cast<float>(config_.num_train_timesteps);
    return shift * s / (1.0f + shift_minus_one * s);
  };
  sigma_max_ = shifted(static_cast<float>(config_.num_train_timesteps));
  sigma_min_ = shifted(1.0f);
}

void FlowMatchEulerScheduler::set_timesteps(int num_inference_steps) {
  OMNI_CHECK(num_inference_steps >= 1, InvalidRequest,
             "FlowMatchEulerDiscreteScheduler: num_inference_steps must be at least 1, got ",
             num_inference_steps);
  const double train = static_cast<double>(config_.num_train_timesteps);
  std::vector<double> sigmas =
      internal::linspace(static_cast<double>(sigma_max_) * train,
                         static_cast<double>(sigma_min_) * train, num_inference_steps);
  for (double& s : sigmas) s /= train;
  internal::apply_flow_shift(sigmas, config_.shift);
  if (config_.shift_terminal) internal::stretch_to_terminal(sigmas, *config_.shift_terminal);

  const auto n = static_cast<std::int64_t>(num_inference_steps);
  timesteps_ = torch::empty({n}, torch::kFloat32);
  sigmas_ = torch::empty({n + 1}, torch::kFloat32);
  auto* t = timesteps_.data_ptr<float>();
  auto* s = sigmas_.data_ptr<float>();
  const float train_f = static_cast<float>(config_.num_train_timesteps);
  for (std::int64_t i = 0; i < n; ++i) {
    s[i] = static_cast<float>(sigmas[i]);
    if (config_.invert_sigmas) s[i] = 1.0f - s[i];
    t[i] = s[i] * train_f;
  }
  s[n] = config_.invert_sigmas ? 1.0f : 0.0f;
  begin_index_ = -1;
  step_index_ = -1;
}

void FlowMatchEulerScheduler::set_begin_index(int begin_index) {
  OMNI_CHECK(timesteps_.defined() && begin_index >= 0 && begin_index < timesteps_.size(0),
             InvalidRequest, "FlowMatchEulerDiscreteScheduler: begin index ", begin_index,
             " is outside the schedule of ", timesteps_.defined() ? timesteps_.size(0) : 0,
             " timesteps (set_timesteps() first)");
  begin_index_ = begin_index;
}

torch::Tensor FlowMatchEulerScheduler::step(const torch::Tensor& model_output, double timestep,
                                            const torch::Tensor& sample) {
  OMNI_CHECK(timesteps_.defined(), InvalidRequest,
             "FlowMatchEulerDiscreteScheduler: step() before set_timesteps()");
  OMNI_CHECK(model_output.sizes() == sample.sizes(), InvalidRequest,
             "FlowMatchEulerDiscreteScheduler: model_output ", model_output.sizes(), " and sample ",
             sample.sizes(), " differ in shape");
  if (step_index_ < 0 && begin_index_ >= 0) step_index_ = begin_index_;
  if (step_index_ < 0) {
    // diffusers' index_for_timestep (Note [First step position]): the float32 schedule compared
    // with the timestep rounded to float32; the second match when there are several.
    const float wanted = static_cast<float>(timestep);
    const auto* t = timesteps_.data_ptr<float>();
    std::vector<int> matches;
    for (int i = 0; i < timesteps_.size(0); ++i)
      if (t[i] == wanted) matches.push_back(i);
    OMNI_CHECK(!matches.empty(), InvalidRequest, "FlowMatchEulerDiscreteScheduler: timestep ",
               timestep, " is not in the schedule");
    step_index_ = matches.size() > 1 ? matches[1] : matches[0];
  }
  OMNI_CHECK(step_index_ < timesteps_.size(0), InvalidRequest,
             "FlowMatchEulerDiscreteScheduler: step() called past the last of ", timesteps_.size(0),
             " timesteps");
  const torch::Tensor dt = sigmas_[step_index_ + 1] - sigmas_[step_index_];
  torch::Tensor prev = sample.to(torch::kFloat32) + dt * model_output;
  ++step_index_;
  return prev.to(model_output.scalar_type());
}

}  // namespace omni::schedulers
