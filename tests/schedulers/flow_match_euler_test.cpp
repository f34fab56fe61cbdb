#include "omni/schedulers/flow_match_euler.h"

#include <gtest/gtest.h>

#include "omni/error.h"
#include "schedulers/fixture_loop.h"

using namespace omni::schedulers;
using namespace omni::schedulers::testing;

// Named, not anonymous: in a unity build this file is included into another,
// and GCC warns of fixtures with internal linkage there (-Wsubobject-linkage).
namespace flow_match_euler_test {

class FlowMatchEulerFixture : public ::testing::TestWithParam<FixtureCase> {};

FlowMatchEulerScheduler make(double shift) {
  FlowMatchEulerConfig config;
  config.shift = shift;
  return FlowMatchEulerScheduler(config, "test");
}

}  // namespace flow_match_euler_test
using namespace flow_match_euler_test;

TEST_P(FlowMatchEulerFixture, MatchesReference) {
  check_against_fixture(GetParam().folder, GetParam().steps, TimestepMatch::kRelative1e6);
}

INSTANTIATE_TEST_SUITE_P(Wan, FlowMatchEulerFixture,
                         ::testing::Values(FixtureCase{"scheduler_flowmatch_euler_shift3", 8},
                                           FixtureCase{"scheduler_flowmatch_euler_shift3", 40},
                                           FixtureCase{"scheduler_flowmatch_euler_shift12", 8},
                                           FixtureCase{"scheduler_flowmatch_euler_shift12", 40}),
                         case_name);

// Note [FlowMatch sigma_min is shifted twice]: the last level is the shift
// applied to the already shifted 1/1000, not to 1/1000 itself.
TEST(FlowMatchEuler, LastSigmaIsShiftedTwice) {
  auto scheduler = make(3.0);
  scheduler.set_timesteps(8);
  const double once = 3.0 * 0.001 / (1.0 + 2.0 * 0.001);
  const double twice = 3.0 * once / (1.0 + 2.0 * once);
  EXPECT_NEAR(scheduler.sigmas()[7].item<double>(), twice, 1e-7);
  EXPECT_EQ(scheduler.sigmas()[0].item<float>(), 1.0f);
  EXPECT_FLOAT_EQ(scheduler.timesteps()[7].item<float>(), static_cast<float>(twice) * 1000.0f);
}

TEST(FlowMatchEuler, StepIsEulerAndKeepsModelOutputDtype) {
  auto scheduler = make(5.0);
  scheduler.set_timesteps(4);
  const auto sample = torch::randn({2, 3}, torch::kFloat64);
  const auto velocity = torch::randn({2, 3}, torch::kFloat64);
  const double t0 = scheduler.timesteps()[0].item<double>();
  const double dt = scheduler.sigmas()[1].item<double>() - scheduler.sigmas()[0].item<double>();
  const auto prev = scheduler.step(velocity, t0, sample);
  EXPECT_EQ(prev.scalar_type(), torch::kFloat64);
  // diffusers rounds the sample to float32 before the update.
  const auto want = sample.to(torch::kFloat32).to(torch::kFloat64) + dt * velocity;
  EXPECT_LE(max_abs_diff(prev, want), 1e-12);

  // A float32 sample with a float64 model output gives float64, as diffusers does.
  scheduler.set_timesteps(4);
  EXPECT_EQ(scheduler.step(velocity, t0, sample.to(torch::kFloat32)).scalar_type(),
            torch::kFloat64);
}

TEST(FlowMatchEuler, FirstStepFindsItsPositionFromTheTimestep) {
  auto scheduler = make(3.0);
  scheduler.set_timesteps(6);
  const auto sample = torch::ones({4});
  const auto velocity = torch::full({4}, 2.0);
  // Start at the third timestep (as an img2img pipeline would).
  const auto prev = scheduler.step(velocity, scheduler.timesteps()[2].item<double>(), sample);
  const float dt = scheduler.sigmas()[3].item<float>() - scheduler.sigmas()[2].item<float>();
  EXPECT_TRUE(torch::allclose(prev, torch::full({4}, 1.0f + 2.0f * dt)));
}

TEST(FlowMatchEuler, InvertedSigmasEndAtOne) {
  FlowMatchEulerConfig config;
  config.shift = 3.0;
  config.invert_sigmas = true;
  FlowMatchEulerScheduler inverted(config, "test");
  auto plain = make(3.0);
  inverted.set_timesteps(5);
  plain.set_timesteps(5);
  EXPECT_EQ(inverted.sigmas()[5].item<float>(), 1.0f);
  EXPECT_TRUE(torch::equal(inverted.sigmas().slice(0, 0, 5), 1.0f - plain.sigmas().slice(0, 0, 5)));
  EXPECT_TRUE(torch::equal(inverted.timesteps(), inverted.sigmas().slice(0, 0, 5) * 1000.0f));
}

TEST(FlowMatchEuler, ShiftTerminalStretchesTheEnd) {
  FlowMatchEulerConfig config;
  config.shift = 3.0;
  config.shift_terminal = 0.1;
  FlowMatchEulerScheduler scheduler(config, "test");
  scheduler.set_timesteps(10);
  EXPECT_NEAR(scheduler.sigmas()[9].item<double>(), 0.1, 1e-7);
  EXPECT_NEAR(scheduler.sigmas()[0].item<double>(), 1.0, 1e-7);
}

TEST(FlowMatchEuler, MisuseIsAnInvalidRequest) {
  auto scheduler = make(3.0);
  const auto x = torch::zeros({3});
  EXPECT_THROW(scheduler.step(x, 1000.0, x), omni::InvalidRequest);  // before set_timesteps
  EXPECT_THROW(scheduler.set_timesteps(0), omni::InvalidRequest);
  scheduler.set_timesteps(2);
  EXPECT_THROW(scheduler.step(x, 123.25, x), omni::InvalidRequest);  // not in the schedule
  EXPECT_THROW(scheduler.step(torch::zeros({4}), 1000.0, x), omni::InvalidRequest);  // shapes
  scheduler.step(x, 1000.0, x);
  scheduler.step(x, 0.0, x);
  EXPECT_THROW(scheduler.step(x, 0.0, x), omni::InvalidRequest);  // past the end
}
