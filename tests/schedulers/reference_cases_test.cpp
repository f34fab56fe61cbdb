// Config values the Wan fixtures do not cover (bh1, order 3, sigma_min final
// level, disable_corrector, shift_terminal, inverted sigmas, a non-integer
// shift, one step, a repeated first timestep with begin index 0), against
// diffusers' own schedulers: see data/make_reference_cases.py.
#include <gtest/gtest.h>

#include <cmath>

#include "omni/error.h"
#include "schedulers/fixture_loop.h"

using namespace omni::schedulers;
using namespace omni::schedulers::testing;

namespace {

const std::filesystem::path kData =
    std::filesystem::path(OMNI_SOURCE_DIR) / "tests/schedulers/data";

torch::Tensor run_case_loop(Scheduler& scheduler, const nlohmann::json& entry,
                            const torch::Tensor& initial, const torch::Tensor& c,
                            torch::ScalarType dtype) {
  scheduler.set_timesteps(entry.at("steps").get<int>());
  if (!entry.at("begin_index").is_null())
    scheduler.set_begin_index(entry.at("begin_index").get<int>());
  return run_fixture_loop(scheduler, initial, c, dtype);
}

}  // namespace

TEST(ReferenceCases, MatchDiffusers) {
  const nlohmann::json listing = omni::io::read_json_file(kData / "reference_cases.json");
  const auto outputs = kData / "reference_cases.safetensors";
  ASSERT_GE(listing.size(), 10u);
  for (const auto& entry : listing) {
    const std::string name = entry.at("name");
    SCOPED_TRACE(name);
    auto scheduler = make_scheduler(entry.at("config"), name);
    const auto inputs = wan_data(entry.at("inputs")) / "inputs.safetensors";
    const torch::Tensor initial = load_tensor(inputs, "initial_sample");
    const torch::Tensor c = load_tensor(inputs, "c");

    const torch::Tensor got64 = run_case_loop(*scheduler, entry, initial, c, torch::kFloat64);
    const torch::Tensor want_t = load_tensor(outputs, name + ".timesteps");
    const torch::Tensor got_t = scheduler->timesteps().to(torch::kFloat64);
    ASSERT_EQ(got_t.sizes(), want_t.sizes());
    const double t_rel =
        ((got_t - want_t).abs() / want_t.abs().clamp_min(1.0)).max().item<double>();
    EXPECT_LE(t_rel, 1e-6) << got_t << "\nwant\n" << want_t;
    if (scheduler->timesteps().scalar_type() == torch::kInt64) {
      EXPECT_TRUE(torch::equal(got_t, want_t));
    }
    const double sigma_err =
        max_abs_diff(scheduler->sigmas(), load_tensor(outputs, name + ".sigmas"));
    EXPECT_LE(sigma_err, 1e-6);

    const torch::Tensor got32 = run_case_loop(*scheduler, entry, initial, c, torch::kFloat32);
    const torch::Tensor want64 = load_tensor(outputs, name + ".prev_samples");
    const torch::Tensor want32 = load_tensor(outputs, name + ".prev_samples.f32");
    ASSERT_EQ(want64.scalar_type(), torch::kFloat64);
    double worst64 = 0.0;
    double worst32 = 0.0;
    const auto& finite = entry.at("finite_steps");
    for (int64_t i = 0; i < got64.size(0); ++i) {
      ASSERT_TRUE(torch::isfinite(got64[i]).all().item<bool>()) << "step " << i;
      // Note [UniPC last step to sigma 0]: diffusers' bh1 step onto σ = 0 is
      // NaN; this implementation returns the (finite) x0 prediction there.
      if (!finite.at(i).get<bool>()) continue;
      worst64 = std::max(worst64, max_abs_diff(got64[i], want64[i]));
      worst32 = std::max(worst32, max_abs_diff(got32[i], want32[i]));
    }
    report(name + ".sigmas_max_abs_err", sigma_err);
    report(name + ".f64_run_vs_f64_reference", worst64);
    report(name + ".f32_run_vs_f32_reference", worst32);
    EXPECT_LE(worst64, 1e-5);
    EXPECT_LE(worst32, 1e-5);
  }
}

// Note [First step position]: without a begin index a repeated first
// timestep makes the first step start at the second level, as in diffusers.
TEST(ReferenceCases, RepeatedFirstTimestepWithoutBeginIndexStartsAtTheSecond) {
  const nlohmann::json listing = omni::io::read_json_file(kData / "reference_cases.json");
  const auto entry = std::find_if(listing.begin(), listing.end(), [](const auto& e) {
    return e.at("name") == "unipc_shift60_20_steps_begin0";
  });
  ASSERT_NE(entry, listing.end());
  auto looked_up = make_scheduler(entry->at("config"), "looked up");
  auto begin_one = make_scheduler(entry->at("config"), "begin 1");
  looked_up->set_timesteps(20);
  begin_one->set_timesteps(20);
  ASSERT_EQ(looked_up->timesteps()[0].item<int64_t>(), looked_up->timesteps()[1].item<int64_t>());
  begin_one->set_begin_index(1);
  const auto x = torch::randn({2, 3}, torch::kFloat64);
  const auto v = torch::randn({2, 3}, torch::kFloat64);
  const double t0 = looked_up->timesteps()[0].item<double>();
  EXPECT_TRUE(torch::equal(looked_up->step(v, t0, x), begin_one->step(v, t0, x)));
  EXPECT_THROW(begin_one->set_begin_index(20), omni::InvalidRequest);
}
