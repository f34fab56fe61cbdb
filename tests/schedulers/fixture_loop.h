// Shared helpers of the scheduler tests: the reference fixtures of
// tests/data/wan (README.md §4) and the loop that produced them.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include "omni/io/json_config.h"
#include "omni/io/safetensors.h"
#include "omni/schedulers/scheduler.h"

namespace omni::schedulers::testing {

inline std::filesystem::path wan_data(const std::string& folder) {
  return std::filesystem::path(OMNI_TEST_DATA) / "wan" / folder;
}

inline std::unique_ptr<Scheduler> scheduler_from(const std::filesystem::path& config_json,
                                                 const SchedulerOverrides& overrides = {}) {
  return make_scheduler(io::read_json_file(config_json), config_json.string(), overrides);
}

// One tensor of a safetensors file, owned and on the CPU.
inline torch::Tensor load_tensor(const std::filesystem::path& file, const std::string& key) {
  return io::SafetensorsFile::open(file)->view(key).clone();
}

inline double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
}

// The fixture procedure: x ← initial; for each t, model_output = 0.5·x + (t/1000)·c
// and x ← step(model_output, t, x). Returns every step's x, stacked, in `dtype`.
inline torch::Tensor run_fixture_loop(Scheduler& scheduler, const torch::Tensor& initial,
                                      const torch::Tensor& c, torch::ScalarType dtype) {
  torch::Tensor x = initial.to(dtype);
  const torch::Tensor cd = c.to(dtype);
  std::vector<torch::Tensor> out;
  const torch::Tensor timesteps = scheduler.timesteps().to(torch::kFloat64);
  for (int64_t i = 0; i < timesteps.size(0); ++i) {
    const double t = timesteps[i].item<double>();
    const torch::Tensor model_output = x * 0.5 + cd * (t / 1000.0);
    x = scheduler.step(model_output, t, x);
    EXPECT_EQ(x.scalar_type(), dtype) << "step " << i;
    out.push_back(x);
  }
  return torch::stack(out);
}

// The largest per-step max abs difference, and the step where it occurs.
struct StepError {
  double max = 0.0;
  int64_t step = -1;
};

inline StepError worst_step(const torch::Tensor& got, const torch::Tensor& want) {
  StepError e;
  for (int64_t i = 0; i < got.size(0); ++i) {
    const double d = max_abs_diff(got[i], want[i]);
    if (d > e.max || e.step < 0) e = {d, i};
  }
  return e;
}

// Prints and records a measured error so that it shows in the test log and
// in the gtest XML report.
inline void report(const std::string& name, double value) {
  std::cout << "[ measured ] " << name << " = " << value << std::endl;
  ::testing::Test::RecordProperty(name, std::to_string(value));
}

// One fixture folder and step count, for value-parameterised tests.
struct FixtureCase {
  const char* folder;
  int steps;
};

inline void PrintTo(const FixtureCase& c, std::ostream* os) {
  *os << c.folder << " N=" << c.steps;
}

// "shift3_N8" for scheduler_…_shift3 with 8 steps.
inline std::string case_name(const ::testing::TestParamInfo<FixtureCase>& info) {
  const std::string folder = info.param.folder;
  return folder.substr(folder.rfind('_') + 1) + "_N" + std::to_string(info.param.steps);
}

enum class TimestepMatch { kExact, kRelative1e6 };

// Checks a scheduler built from `folder`/config.json against the folder's
// outputs for N steps, with README §4's tolerances, and reports the errors.
inline void check_against_fixture(const std::string& folder, int n, TimestepMatch match) {
  const auto dir = wan_data(folder);
  auto scheduler = scheduler_from(dir / "config.json");
  scheduler->set_timesteps(n);
  const auto outputs = dir / "outputs.safetensors";
  const std::string suffix = "_" + std::to_string(n);
  const std::string tag = folder + suffix;

  const torch::Tensor want_t = load_tensor(outputs, "timesteps" + suffix).to(torch::kFloat64);
  const torch::Tensor got_t = scheduler->timesteps().to(torch::kFloat64);
  ASSERT_EQ(got_t.sizes(), want_t.sizes());
  switch (match) {
    case TimestepMatch::kExact:
      EXPECT_EQ(scheduler->timesteps().scalar_type(), torch::kInt64);
      EXPECT_TRUE(torch::equal(got_t, want_t)) << got_t << "\nwant\n" << want_t;
      break;
    case TimestepMatch::kRelative1e6: {
      EXPECT_EQ(scheduler->timesteps().scalar_type(), torch::kFloat32);
      const double rel = ((got_t - want_t).abs() / want_t.abs()).max().item<double>();
      report(tag + ".timesteps_max_rel_err", rel);
      EXPECT_LE(rel, 1e-6) << got_t << "\nwant\n" << want_t;
      break;
    }
  }

  const torch::Tensor want_s = load_tensor(outputs, "sigmas" + suffix);
  ASSERT_EQ(scheduler->sigmas().sizes(), want_s.sizes());
  EXPECT_EQ(scheduler->sigmas().scalar_type(), torch::kFloat32);
  EXPECT_EQ(scheduler->sigmas()[n].item<float>(), 0.0f);
  const double sigma_err = max_abs_diff(scheduler->sigmas(), want_s);
  report(tag + ".sigmas_max_abs_err", sigma_err);
  EXPECT_LE(sigma_err, 1e-6);

  const auto inputs = dir / "inputs.safetensors";
  const torch::Tensor initial = load_tensor(inputs, "initial_sample");
  const torch::Tensor c = load_tensor(inputs, "c");
  const torch::Tensor want64 = load_tensor(outputs, "prev_samples" + suffix);
  const torch::Tensor want32 = load_tensor(outputs, "prev_samples" + suffix + ".f32");
  ASSERT_EQ(want64.size(0), n);

  scheduler->set_timesteps(n);
  const torch::Tensor got64 = run_fixture_loop(*scheduler, initial, c, torch::kFloat64);
  // set_timesteps() must reset the multistep state: a second float32 run on
  // the same object equals a run on a fresh one.
  scheduler->set_timesteps(n);
  const torch::Tensor got32 = run_fixture_loop(*scheduler, initial, c, torch::kFloat32);
  auto fresh = scheduler_from(dir / "config.json");
  fresh->set_timesteps(n);
  EXPECT_TRUE(torch::equal(got32, run_fixture_loop(*fresh, initial, c, torch::kFloat32)));

  const StepError e64 = worst_step(got64, want64);
  const StepError e32 = worst_step(got32, want64);
  const StepError e32_f32 = worst_step(got32, want32);
  report(tag + ".f64_run_vs_f64_key", e64.max);
  // The key is the float64 result rounded to F32; rounding ours the same way
  // shows how much of e64 is that rounding (0 when the runs agree exactly).
  report(tag + ".f64_run_rounded_vs_f64_key", max_abs_diff(got64.to(torch::kFloat32), want64));
  report(tag + ".f32_run_vs_f64_key", e32.max);
  report(tag + ".f32_run_vs_f32_key", e32_f32.max);
  EXPECT_LE(e64.max, 1e-5) << "float64 run, worst step " << e64.step;
  EXPECT_LE(e32.max, 1e-5) << "float32 run, worst step " << e32.step;
  EXPECT_LE(e32_f32.max, 1e-5) << "float32 run vs .f32 key, worst step " << e32_f32.step;
}

}  // namespace omni::schedulers::testing
