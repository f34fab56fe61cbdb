#include "omni/schedulers/unipc_multistep.h"

#include <gtest/gtest.h>

#include "omni/error.h"
#include "schedulers/fixture_loop.h"

using namespace omni::schedulers;
using namespace omni::schedulers::testing;

// Named, not anonymous: in a unity build this file is included into another,
// and GCC warns of fixtures with internal linkage there (-Wsubobject-linkage).
namespace unipc_multistep_test {

class UniPCFixture : public ::testing::TestWithParam<FixtureCase> {};

UniPCConfig wan_config(double flow_shift) {
  UniPCConfig config;
  config.flow_shift = flow_shift;
  return config;
}

}  // namespace unipc_multistep_test
using namespace unipc_multistep_test;

TEST_P(UniPCFixture, MatchesReference) {
  check_against_fixture(GetParam().folder, GetParam().steps, TimestepMatch::kExact);
}

INSTANTIATE_TEST_SUITE_P(Wan, UniPCFixture,
                         ::testing::Values(FixtureCase{"scheduler_unipc_flow_shift3", 8},
                                           FixtureCase{"scheduler_unipc_flow_shift3", 40},
                                           FixtureCase{"scheduler_unipc_flow_shift12", 8},
                                           FixtureCase{"scheduler_unipc_flow_shift12", 40}),
                         case_name);

// README §5: the pipeline's set_timesteps(6) at shift 12 truncates σ·1000
// (983.6 → 983) and keeps the first level just below 1.
TEST(UniPC, WanPipelineSchedule) {
  const auto dir = wan_data("wan_pipeline");
  auto scheduler = scheduler_from(dir / "scheduler" / "config.json");
  scheduler->set_timesteps(6);
  const auto outputs = dir / "outputs.safetensors";
  EXPECT_TRUE(torch::equal(scheduler->timesteps(),
                           torch::tensor({999, 983, 960, 923, 857, 707}, torch::kInt64)));
  EXPECT_TRUE(
      torch::equal(scheduler->timesteps().to(torch::kFloat32), load_tensor(outputs, "timesteps")));
  const double sigma_err = max_abs_diff(scheduler->sigmas(), load_tensor(outputs, "sigmas"));
  report("wan_pipeline.sigmas_max_abs_err", sigma_err);
  EXPECT_LE(sigma_err, 1e-6);
  EXPECT_EQ(scheduler->sigmas()[0].item<float>(), static_cast<float>(1.0 - 1e-6));
}

// README §5 "scheduler-only check": the pipeline's guided predictions fed to
// one scheduler from its float32 latents reproduce its per-step latents.
TEST(UniPC, WanPipelineStepsFromStoredPredictions) {
  const auto dir = wan_data("wan_pipeline");
  const auto outputs = dir / "outputs.safetensors";
  const auto latents = load_tensor(dir / "inputs.safetensors", "latents");
  for (const std::string suffix : {"", ".f32"}) {
    auto scheduler = scheduler_from(dir / "scheduler" / "config.json");
    scheduler->set_timesteps(6);
    const auto noise_pred = load_tensor(outputs, "step_noise_pred" + suffix);
    const auto want = load_tensor(outputs, "step_latents_out" + suffix);
    torch::Tensor x = latents;
    double worst = 0.0;
    for (int64_t i = 0; i < 6; ++i) {
      x = scheduler->step(noise_pred[i], scheduler->timesteps()[i].item<double>(), x);
      ASSERT_EQ(x.scalar_type(), torch::kFloat32);
      worst = std::max(worst, max_abs_diff(x, want[i]));
    }
    report("wan_pipeline.step_latents_out" + suffix + "_max_abs_err", worst);
    EXPECT_LE(worst, 1e-5);
  }
}

// With the latents in float32 and the guided prediction in float64 (the
// pipeline's float64 run), the result keeps the sample's dtype.
TEST(UniPC, ResultHasTheDtypeOfTheSample) {
  UniPCMultistepScheduler scheduler(wan_config(3.0), "test");
  scheduler.set_timesteps(3);
  torch::Tensor x = torch::randn({2, 4});
  for (int64_t i = 0; i < 3; ++i) {
    x = scheduler.step(torch::randn({2, 4}, torch::kFloat64),
                       scheduler.timesteps()[i].item<double>(), x);
    EXPECT_EQ(x.scalar_type(), torch::kFloat32) << "step " << i;
  }
}

// Order 1 without the corrector is the exact solution of the linear ODE in
// x0 space, which for flow sigmas is the Euler step x + (σ_next − σ)·v; an
// independent check of the predictor's algebra.
TEST(UniPC, FirstOrderWithoutCorrectorIsTheEulerStep) {
  UniPCConfig config = wan_config(5.0);
  config.solver_order = 1;
  for (int k = 0; k < 10; ++k) config.disable_corrector.push_back(k);
  UniPCMultistepScheduler scheduler(config, "test");
  scheduler.set_timesteps(10);
  torch::Tensor x = torch::randn({3, 5}, torch::kFloat64);
  double worst = 0.0;
  for (int64_t i = 0; i < 10; ++i) {
    const auto v = torch::randn({3, 5}, torch::kFloat64);
    const double dt =
        scheduler.sigmas()[i + 1].item<double>() - scheduler.sigmas()[i].item<double>();
    const auto euler = x + dt * v;
    x = scheduler.step(v, scheduler.timesteps()[i].item<double>(), x);
    worst = std::max(worst, max_abs_diff(x, euler));
  }
  EXPECT_LE(worst, 1e-5);
}

// The corrector matters: disabling it changes the trajectory of the Wan
// configuration from the second step on, and only from there.
TEST(UniPC, DisableCorrectorSkipsThatStepsCorrection) {
  UniPCMultistepScheduler with(wan_config(3.0), "test");
  UniPCConfig config = wan_config(3.0);
  config.disable_corrector = {1};
  UniPCMultistepScheduler without(config, "test");
  const auto initial = torch::randn({1, 4, 2, 4, 4});
  const auto c = torch::randn({1, 4, 2, 4, 4});
  with.set_timesteps(5);
  without.set_timesteps(5);
  const auto a = run_fixture_loop(with, initial, c, torch::kFloat64);
  const auto b = run_fixture_loop(without, initial, c, torch::kFloat64);
  EXPECT_TRUE(torch::equal(a[0], b[0]));
  EXPECT_TRUE(torch::equal(a[1], b[1]));      // step 1 corrects step 0's prediction
  EXPECT_GT(max_abs_diff(a[2], b[2]), 1e-4);  // step 2 would correct step 1's
}

TEST(UniPC, SigmaMinFinalLevelRepeatsTheLastLevel) {
  UniPCConfig config = wan_config(3.0);
  config.final_sigmas_type = FinalSigmas::kSigmaMin;
  UniPCMultistepScheduler scheduler(config, "test");
  scheduler.set_timesteps(4);
  EXPECT_EQ(scheduler.sigmas()[4].item<float>(), scheduler.sigmas()[3].item<float>());
}

TEST(UniPC, MisuseIsAnInvalidRequest) {
  UniPCMultistepScheduler scheduler(wan_config(3.0), "test");
  const auto x = torch::zeros({3});
  EXPECT_THROW(scheduler.step(x, 999.0, x), omni::InvalidRequest);
  EXPECT_THROW(scheduler.set_timesteps(-1), omni::InvalidRequest);
  scheduler.set_timesteps(1);
  EXPECT_THROW(scheduler.step(torch::zeros({2}), 999.0, x), omni::InvalidRequest);
  scheduler.step(x, 999.0, x);
  EXPECT_THROW(scheduler.step(x, 999.0, x), omni::InvalidRequest);
}

TEST(UniPC, LowerOrderFinalOffIsRejectedWhereItCannotBeFinite) {
  UniPCConfig config = wan_config(3.0);
  config.lower_order_final = false;
  try {
    UniPCMultistepScheduler scheduler(config, "cfg.json");
    FAIL() << "expected ConfigError";
  } catch (const omni::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("lower_order_final"), std::string::npos) << e.what();
  }
  config.solver_order = 1;
  EXPECT_NO_THROW(UniPCMultistepScheduler(config, "cfg.json"));
}
