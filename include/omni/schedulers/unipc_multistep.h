// UniPCMultistepScheduler in its flow-matching form (Wan2.x): a multistep
// predictor (UniP) and corrector (UniC) on the predicted x0, with flow sigmas
// (alpha = 1 − σ).
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "omni/schedulers/scheduler.h"

namespace omni::schedulers {

// B(h) of the UniPC update: bh1 uses B(h) = h, bh2 uses B(h) = e^h − 1.
// With a final level of 0, diffusers' bh1 returns NaN at the last step; this
// implementation returns the x0 prediction there (Note [UniPC last step to
// sigma 0] in the .cpp). The Wan configs use bh2.
enum class UniPCSolverType { kBh1, kBh2 };

// The level after the last timestep: 0, or the last level of the schedule.
enum class FinalSigmas { kZero, kSigmaMin };

// The fields of diffusers' UniPCMultistepScheduler config that change the
// numbers on the flow path. Only that path is implemented:
// use_flow_sigmas = true, prediction_type = "flow_prediction",
// predict_x0 = true. Thresholding, solver_p, dynamic shifting and Karras /
// exponential / beta sigmas are rejected when enabled. The beta schedule
// fields are read and checked but do not affect flow sigmas.
struct UniPCConfig {
  int num_train_timesteps = 1000;
  int solver_order = 2;
  UniPCSolverType solver_type = UniPCSolverType::kBh2;
  bool lower_order_final = true;
  // Steps k whose corrector (applied at step k + 1) is skipped.
  std::vector<int> disable_corrector;
  double flow_shift = 1.0;
  FinalSigmas final_sigmas_type = FinalSigmas::kZero;
  // As FlowMatchEulerConfig::shift_terminal.
  std::optional<double> shift_terminal;

  // Reads a diffusers config; ConfigError naming the field at fault.
  static UniPCConfig from_json(const nlohmann::json& config, const std::string& source);
  // ConfigError naming the field whose value cannot work.
  void validate(const std::string& source) const;
};

class UniPCMultistepScheduler final : public Scheduler {
 public:
  // Validates `config` (ConfigError).
  UniPCMultistepScheduler(UniPCConfig config, const std::string& source);

  std::string class_name() const override { return "UniPCMultistepScheduler"; }
  void set_timesteps(int num_inference_steps) override;
  const torch::Tensor& timesteps() const override { return timesteps_; }
  const torch::Tensor& sigmas() const override { return sigmas_; }
  void set_begin_index(int begin_index) override;
  // Corrects `sample` with this model output (from the second step on), then
  // predicts the next sample. The result has the dtype of `sample`; the
  // history keeps the predicted x0 in the promoted dtype of sample and
  // model_output, as diffusers does.
  torch::Tensor step(const torch::Tensor& model_output, double timestep,
                     const torch::Tensor& sample) override;
  int num_train_timesteps() const override { return config_.num_train_timesteps; }
  double shift() const override { return config_.flow_shift; }

  const UniPCConfig& config() const { return config_; }

 private:
  // UniC: redoes the last prediction from last_sample_, now that the model
  // output at its target level gives `this_x0`.
  torch::Tensor correct(const torch::Tensor& this_x0) const;
  // UniP: the sample at the next level from `sample` and the x0 history.
  torch::Tensor predict(const torch::Tensor& sample) const;

  UniPCConfig config_;
  torch::Tensor timesteps_;
  torch::Tensor sigmas_;
  // Multistep state, reset by set_timesteps().
  std::vector<torch::Tensor> x0_history_;  // newest last, at most solver_order
  torch::Tensor last_sample_;              // the sample the last prediction started from
  int lower_order_nums_ = 0;
  int order_ = 0;         // the order of the last prediction, used by the next correction
  int begin_index_ = -1;  // -1: none set
  int step_index_ = -1;   // -1: the next step() finds it from its timestep
};

}  // namespace omni::schedulers
