// FlowMatchEulerDiscreteScheduler: first-order Euler steps along a
// flow-matching velocity, x_next = x + (σ_next − σ)·v.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "omni/schedulers/scheduler.h"

namespace omni::schedulers {

// The fields of diffusers' FlowMatchEulerDiscreteScheduler config that change
// the numbers. The others are checked when read: resolution-dependent
// shifting, Karras / exponential / beta sigmas and stochastic sampling are
// not implemented and rejected when enabled.
struct FlowMatchEulerConfig {
  int num_train_timesteps = 1000;
  double shift = 1.0;
  bool invert_sigmas = false;
  // Stretches the shifted schedule so that it ends at this value; 0 and null
  // both mean off (diffusers tests it for truth).
  std::optional<double> shift_terminal;

  // Reads a diffusers config; ConfigError naming the field at fault.
  static FlowMatchEulerConfig from_json(const nlohmann::json& config, const std::string& source);
  // ConfigError naming the field whose value cannot work.
  void validate(const std::string& source) const;
};

class FlowMatchEulerScheduler final : public Scheduler {
 public:
  // Validates `config` (ConfigError) and builds the training schedule's ends.
  FlowMatchEulerScheduler(FlowMatchEulerConfig config, const std::string& source);

  std::string class_name() const override { return "FlowMatchEulerDiscreteScheduler"; }
  void set_timesteps(int num_inference_steps) override;
  const torch::Tensor& timesteps() const override { return timesteps_; }
  const torch::Tensor& sigmas() const override { return sigmas_; }
  void set_begin_index(int begin_index) override;
  // As diffusers: `sample` is rounded to float32 first, and the result has
  // the dtype of `model_output`.
  torch::Tensor step(const torch::Tensor& model_output, double timestep,
                     const torch::Tensor& sample) override;
  int num_train_timesteps() const override { return config_.num_train_timesteps; }
  double shift() const override { return config_.shift; }

  const FlowMatchEulerConfig& config() const { return config_; }

 private:
  FlowMatchEulerConfig config_;
  // The shifted training sigmas at t = num_train_timesteps and t = 1, in float32
  // (Note [FlowMatch sigma_min is shifted twice] in the .cpp).
  float sigma_max_ = 1.0f;
  float sigma_min_ = 0.0f;
  torch::Tensor timesteps_;
  torch::Tensor sigmas_;
  int begin_index_ = -1;  // -1: none set
  int step_index_ = -1;   // -1: the next step() finds it from its timestep
};

}  // namespace omni::schedulers
