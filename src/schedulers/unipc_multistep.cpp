#include "omni/schedulers/unipc_multistep.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "omni/error.h"
#include "omni/io/json_config.h"
#include "schedulers/config_fields.h"
#include "schedulers/flow_sigmas.h"

namespace omni::schedulers {

UniPCConfig UniPCConfig::from_json(const nlohmann::json& config, const std::string& source) {
  io::ConfigReader reader(config, source);
  UniPCConfig out;
  out.num_train_timesteps = reader.optional<int>("num_train_timesteps", out.num_train_timesteps);
  out.solver_order = reader.optional<int>("solver_order", out.solver_order);
  // diffusers maps the DPM-Solver names to bh2 (with a deprecation warning).
  const std::string solver_type = internal::read_choice(
      reader, "solver_type", "bh2", {"bh1", "bh2", "midpoint", "heun", "logrho"});
  out.solver_type = solver_type == "bh1" ? UniPCSolverType::kBh1 : UniPCSolverType::kBh2;
  out.lower_order_final = reader.optional<bool>("lower_order_final", out.lower_order_final);
  out.disable_corrector = reader.optional<std::vector<int>>("disable_corrector", {});
  out.flow_shift = reader.optional<double>("flow_shift", out.flow_shift);
  out.final_sigmas_type =
      internal::read_choice(reader, "final_sigmas_type", "zero", {"zero", "sigma_min"}) == "zero"
          ? FinalSigmas::kZero
          : FinalSigmas::kSigmaMin;
  out.shift_terminal = reader.nullable<double>("shift_terminal");
  if (out.shift_terminal == 0.0) out.shift_terminal.reset();

  internal::read_choice(reader, "prediction_type", "epsilon", {"flow_prediction"});
  internal::require_flag(reader, "use_flow_sigmas", true,
                         "only the flow-matching schedule (alpha = 1 - sigma) is implemented");
  internal::require_flag(reader, "predict_x0", true,
                         "only the x0-prediction update is implemented");
  internal::require_flag(reader, "thresholding", false, "dynamic thresholding is not implemented");
  internal::require_null(reader, "solver_p", "an external predictor is not implemented");
  internal::require_flag(reader, "use_karras_sigmas", false, "Karras sigmas are not implemented");
  internal::require_flag(reader, "use_exponential_sigmas", false,
                         "exponential sigmas are not implemented");
  internal::require_flag(reader, "use_beta_sigmas", false, "beta sigmas are not implemented");
  internal::require_flag(reader, "use_dynamic_shifting", false,
                         "resolution-dependent shifting needs a per-request mu");
  internal::read_choice(reader, "time_shift_type", "exponential", {"exponential", "linear"});
  // Read by diffusers but without effect on flow sigmas: the beta schedule
  // (only the discarded training sigmas), the spacing of the non-flow
  // timesteps, and what only thresholding or the Karras-type schedules use.
  internal::read_choice(reader, "beta_schedule", "linear",
                        {"linear", "scaled_linear", "squaredcos_cap_v2"});
  internal::check_type<double>(reader, "beta_start");
  internal::check_type<double>(reader, "beta_end");
  internal::check_type<std::vector<double>>(reader, "trained_betas");
  internal::check_type<bool>(reader, "rescale_betas_zero_snr");
  internal::read_choice(reader, "timestep_spacing", "linspace",
                        {"linspace", "leading", "trailing"});
  internal::check_type<int>(reader, "steps_offset");
  internal::check_type<double>(reader, "dynamic_thresholding_ratio");
  internal::check_type<double>(reader, "sample_max_value");
  internal::check_type<double>(reader, "sigma_min");
  internal::check_type<double>(reader, "sigma_max");
  reader.finish();
  out.validate(source);
  return out;
}

// Note [UniPC last step to sigma 0]
// With final_sigmas_type "zero" the last update goes to σ = 0, where
// λ = log(1 − σ) − log(σ) = +∞ and so h = +∞. An order-1 update is still
// finite (e^{−h} − 1 = −1 and it lands on the x0 prediction), but two of the
// reference's terms are not:
//  - an order-2 prediction divides by r = (λ_s1 − λ_s0)/h = 0, giving inf and
//    NaN; that happens only with lower_order_final = false, which is rejected
//    for solver_order > 1;
//  - bh1's B(h) = −h = −∞ multiplies the order-1 prediction's correction
//    term, which is 0, giving NaN. The term is zero, so predict() leaves it
//    out: bh1 ends on the x0 prediction where diffusers ends on NaN.
void UniPCConfig::validate(const std::string& source) const {
  OMNI_CHECK(num_train_timesteps >= 1, ConfigError, source,
             ": field 'num_train_timesteps' = ", num_train_timesteps, " must be at least 1");
  OMNI_CHECK(solver_order >= 1, ConfigError, source, ": field 'solver_order' = ", solver_order,
             " must be at least 1");
  OMNI_CHECK(std::isfinite(flow_shift) && flow_shift > 0.0, ConfigError, source,
             ": field 'flow_shift' = ", flow_shift, " must be a positive number");
  OMNI_CHECK(!shift_terminal || (std::isfinite(*shift_terminal) && *shift_terminal != 1.0),
             ConfigError, source, ": field 'shift_terminal' = ", shift_terminal.value_or(0.0),
             " must be a number other than 1");
  // Note [UniPC last step to sigma 0].
  OMNI_CHECK(lower_order_final || solver_order == 1 || final_sigmas_type != FinalSigmas::kZero,
             ConfigError, source,
             ": field 'lower_order_final' = false is not supported with solver_order > 1 and "
             "final_sigmas_type 'zero' (the last multistep update onto sigma 0 is not finite)");
}

UniPCMultistepScheduler::UniPCMultistepScheduler(UniPCConfig config, const std::string& source)
    : config_(std::move(config)) {
  config_.validate(source);
}

void UniPCMultistepScheduler::set_timesteps(int num_inference_steps) {
  OMNI_CHECK(num_inference_steps >= 1, InvalidRequest,
             "UniPCMultistepScheduler: num_inference_steps must be at least 1, got ",
             num_inference_steps);
  const double train = static_cast<double>(config_.num_train_timesteps);
  std::vector<double> sigmas = internal::linspace(1.0, 1.0 / train, num_inference_steps + 1);
  sigmas.pop_back();
  internal::apply_flow_shift(sigmas, config_.flow_shift);
  if (config_.shift_terminal) internal::stretch_to_terminal(sigmas, *config_.shift_terminal);
  // diffusers keeps the first level just below 1 so that log(1 − σ) is finite.
  constexpr double kEps = 1e-6;
  if (std::fabs(sigmas[0] - 1.0) < kEps) sigmas[0] -= kEps;
  const double sigma_last = config_.final_sigmas_type == FinalSigmas::kZero ? 0.0 : sigmas.back();

  const auto n = static_cast<std::int64_t>(num_inference_steps);
  timesteps_ = torch::empty({n}, torch::kInt64);
  sigmas_ = torch::empty({n + 1}, torch::kFloat32);
  auto* t = timesteps_.data_ptr<std::int64_t>();
  auto* s = sigmas_.data_ptr<float>();
  for (std::int64_t i = 0; i < n; ++i) {
    // float64 σ·T converted to int64 truncates: 0.999999·1000 → 999.
    t[i] = static_cast<std::int64_t>(sigmas[i] * train);
    s[i] = static_cast<float>(sigmas[i]);
  }
  s[n] = static_cast<float>(sigma_last);

  x0_history_.clear();
  last_sample_ = torch::Tensor();
  lower_order_nums_ = 0;
  order_ = 0;
  begin_index_ = -1;
  step_index_ = -1;
}

void UniPCMultistepScheduler::set_begin_index(int begin_index) {
  OMNI_CHECK(timesteps_.defined() && begin_index >= 0 && begin_index < timesteps_.size(0),
             InvalidRequest, "UniPCMultistepScheduler: begin index ", begin_index,
             " is outside the schedule of ", timesteps_.defined() ? timesteps_.size(0) : 0,
             " timesteps (set_timesteps() first)");
  begin_index_ = begin_index;
}

namespace {

// Note [UniPC coefficients in float32]
// The reference computes every scalar of the update from its float32 sigmas
// with 0-dim float32 tensor ops (log, expm1, linalg.solve), then multiplies
// the sample tensors, which promotes to their dtype. The scalars here are
// the same 0-dim CPU tensors, so a float64 sample sees the same float32
// coefficients, and a CUDA sample receives them as CPU scalars.

// λ = log(α) − log(σ) of a flow level, α = 1 − σ.
torch::Tensor lambda_of(const torch::Tensor& sigma) {
  return torch::log(1 - sigma) - torch::log(sigma);
}

// The B(h) coefficients of one update from level s0 to level t, both
// predictor and corrector: `earlier` holds the levels of the older history
// entries, newest first (order − 1 of them).
struct BhCoefficients {
  torch::Tensor sigma_ratio;       // σ_t / σ_s0
  torch::Tensor alpha_t;           // 1 − σ_t
  torch::Tensor h_phi_1;           // e^{−h} − 1
  torch::Tensor b_h;               // B(−h)
  std::vector<torch::Tensor> rks;  // r_k = (λ_sk − λ_s0)/h, k = 1..order−1
  torch::Tensor r_matrix;          // R[i][k] = r_k^i, with r_order = 1
  torch::Tensor b_vector;          // b_i = h·φ_{i+1}(−h)·i!/B(−h)
};

BhCoefficients bh_coefficients(const torch::Tensor& sigma_t, const torch::Tensor& sigma_s0,
                               const std::vector<torch::Tensor>& earlier, int order,
                               UniPCSolverType solver_type) {
  BhCoefficients c;
  c.alpha_t = 1 - sigma_t;
  c.sigma_ratio = sigma_t / sigma_s0;
  const torch::Tensor lambda_s0 = lambda_of(sigma_s0);
  const torch::Tensor h = lambda_of(sigma_t) - lambda_s0;
  for (const auto& sigma_si : earlier) c.rks.push_back((lambda_of(sigma_si) - lambda_s0) / h);

  std::vector<torch::Tensor> rks = c.rks;
  rks.push_back(torch::ones({}, torch::kFloat32));
  const torch::Tensor r = torch::stack(rks);
  const torch::Tensor hh = -h;  // predict_x0
  c.h_phi_1 = torch::expm1(hh);
  switch (solver_type) {
    case UniPCSolverType::kBh1:
      c.b_h = hh;
      break;
    case UniPCSolverType::kBh2:
      c.b_h = torch::expm1(hh);
      break;
  }
  torch::Tensor h_phi_k = c.h_phi_1 / hh - 1;
  std::int64_t factorial = 1;
  std::vector<torch::Tensor> rows;
  std::vector<torch::Tensor> b;
  for (int i = 1; i <= order; ++i) {
    rows.push_back(torch::pow(r, i - 1));
    b.push_back(h_phi_k * factorial / c.b_h);
    factorial *= i + 1;
    h_phi_k = h_phi_k / hh - 1.0 / static_cast<double>(factorial);
  }
  c.r_matrix = torch::stack(rows);
  c.b_vector = torch::stack(b);
  return c;
}

// D_k = (m_k − m_0)/r_k for the older x0 predictions m_k (k = 1 is the one
// before the newest, m_0).
std::vector<torch::Tensor> scaled_differences(const std::vector<torch::Tensor>& history,
                                              const std::vector<torch::Tensor>& rks) {
  const torch::Tensor& m0 = history.back();
  std::vector<torch::Tensor> d;
  for (std::size_t k = 1; k <= rks.size(); ++k)
    d.push_back((history[history.size() - 1 - k] - m0) / rks[k - 1]);
  return d;
}

// Σ_k rhos[k]·d[k]: the reference's einsum("k,bkc...->bc...").
torch::Tensor weighted_sum(const torch::Tensor& rhos, const std::vector<torch::Tensor>& d) {
  torch::Tensor sum = rhos[0] * d[0];
  for (std::size_t k = 1; k < d.size(); ++k) sum = sum + rhos[static_cast<std::int64_t>(k)] * d[k];
  return sum;
}

}  // namespace

torch::Tensor UniPCMultistepScheduler::predict(const torch::Tensor& sample) const {
  const int order = order_;
  const torch::Tensor& m0 = x0_history_.back();
  std::vector<torch::Tensor> earlier;
  for (int i = 1; i < order; ++i) earlier.push_back(sigmas_[step_index_ - i]);
  const BhCoefficients c = bh_coefficients(sigmas_[step_index_ + 1], sigmas_[step_index_], earlier,
                                           order, config_.solver_type);

  torch::Tensor x_t = c.sigma_ratio * sample - (c.alpha_t * c.h_phi_1) * m0;
  // Only orders above 1 have a correction term (Note [UniPC last step to sigma 0]).
  if (order > 1) {
    const std::vector<torch::Tensor> d1s = scaled_differences(x0_history_, c.rks);
    const torch::Tensor rhos =
        order == 2 ? torch::full({1}, 0.5, torch::TensorOptions().dtype(sample.scalar_type()))
                   : torch::linalg_solve(c.r_matrix.slice(0, 0, order - 1).slice(1, 0, order - 1),
                                         c.b_vector.slice(0, 0, order - 1))
                         .to(sample.scalar_type());
    x_t = x_t - (c.alpha_t * c.b_h) * weighted_sum(rhos, d1s);
  }
  return x_t.to(sample.scalar_type());
}

torch::Tensor UniPCMultistepScheduler::correct(const torch::Tensor& this_x0) const {
  const int order = order_;
  const torch::Tensor& m0 = x0_history_.back();
  std::vector<torch::Tensor> earlier;
  for (int i = 1; i < order; ++i) earlier.push_back(sigmas_[step_index_ - (i + 1)]);
  const BhCoefficients c = bh_coefficients(sigmas_[step_index_], sigmas_[step_index_ - 1], earlier,
                                           order, config_.solver_type);
  const auto dtype = last_sample_.scalar_type();
  const torch::Tensor rhos = order == 1 ? torch::full({1}, 0.5, torch::TensorOptions().dtype(dtype))
                                        : torch::linalg_solve(c.r_matrix, c.b_vector).to(dtype);

  torch::Tensor x_t = c.sigma_ratio * last_sample_ - (c.alpha_t * c.h_phi_1) * m0;
  torch::Tensor correction = rhos[order - 1] * (this_x0 - m0);
  if (order > 1) {
    const std::vector<torch::Tensor> d1s = scaled_differences(x0_history_, c.rks);
    correction = weighted_sum(rhos, d1s) + correction;
  }
  x_t = x_t - (c.alpha_t * c.b_h) * correction;
  return x_t.to(dtype);
}

torch::Tensor UniPCMultistepScheduler::step(const torch::Tensor& model_output, double timestep,
                                            const torch::Tensor& sample) {
  OMNI_CHECK(timesteps_.defined(), InvalidRequest,
             "UniPCMultistepScheduler: step() before set_timesteps()");
  OMNI_CHECK(model_output.sizes() == sample.sizes(), InvalidRequest,
             "UniPCMultistepScheduler: model_output ", model_output.sizes(), " and sample ",
             sample.sizes(), " differ in shape");
  const int n = static_cast<int>(timesteps_.size(0));
  if (step_index_ < 0 && begin_index_ >= 0) step_index_ = begin_index_;
  if (step_index_ < 0) {
    // diffusers' index_for_timestep (Note [First step position]): the second match when there are
    // several, the last index when there is none.
    const auto* t = timesteps_.data_ptr<std::int64_t>();
    std::vector<int> matches;
    for (int i = 0; i < n; ++i)
      if (static_cast<double>(t[i]) == timestep) matches.push_back(i);
    step_index_ = matches.empty() ? n - 1 : (matches.size() > 1 ? matches[1] : matches[0]);
  }
  OMNI_CHECK(step_index_ < n, InvalidRequest,
             "UniPCMultistepScheduler: step() called past the last of ", n, " timesteps");

  // The model predicts the velocity v; UniPC works on x0 = x − σ·v.
  const torch::Tensor x0 = sample - sigmas_[step_index_] * model_output;

  const bool disabled =
      std::find(config_.disable_corrector.begin(), config_.disable_corrector.end(),
                step_index_ - 1) != config_.disable_corrector.end();
  torch::Tensor current = sample;
  if (step_index_ > 0 && !disabled && last_sample_.defined()) current = correct(x0);

  x0_history_.push_back(x0);
  if (static_cast<int>(x0_history_.size()) > config_.solver_order)
    x0_history_.erase(x0_history_.begin());

  int order = config_.solver_order;
  if (config_.lower_order_final) order = std::min(order, n - step_index_);
  order_ = std::min(order, lower_order_nums_ + 1);  // warm-up of the multistep history
  OMNI_INTERNAL_ASSERT(order_ >= 1 && order_ <= static_cast<int>(x0_history_.size()));

  last_sample_ = current;
  torch::Tensor prev = predict(current);
  lower_order_nums_ = std::min(lower_order_nums_ + 1, config_.solver_order);
  ++step_index_;
  return prev;
}

}  // namespace omni::schedulers
