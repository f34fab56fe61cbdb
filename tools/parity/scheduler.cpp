// Runner for the scheduler fixtures (README §4): for every step count N that
// the outputs store, a fresh scheduler, set_timesteps(N), and the loop
// x ← step(0.5·x + (t/1000)·c, t, x) from initial_sample.
#include <regex>
#include <set>

#include "omni/schedulers/scheduler.h"
#include "parity/parity.h"

namespace omni::parity {

Computed run_scheduler(const Fixture& fixture, const RunOptions& options) {
  static const std::regex keyed("^(timesteps|sigmas|prev_samples)_([0-9]+)$");
  std::set<int> step_counts;
  for (const auto& name : fixture.output_names()) {
    std::smatch m;
    if (std::regex_match(name, m, keyed)) step_counts.insert(std::stoi(m[2].str()));
  }
  if (step_counts.empty())
    throw FixtureError(fixture.dir().string() +
                       ": no timesteps_N / sigmas_N / prev_samples_N outputs to check");
  const auto initial = fixture.input("initial_sample").to(options.device);
  const auto c = fixture.input("c").to(options.device);
  Computed out;
  for (const int n : step_counts) {
    auto scheduler = schedulers::make_scheduler(fixture.config(), fixture.config_path().string());
    // README §4 runs the loop without set_begin_index: the first step finds
    // its position from the timestep (Note [First step position]).
    scheduler->set_timesteps(n);
    const auto suffix = "_" + std::to_string(n);
    out["timesteps" + suffix] = scheduler->timesteps().clone();
    out["sigmas" + suffix] = scheduler->sigmas().clone();
    torch::Tensor x = initial;
    std::vector<torch::Tensor> samples;
    const auto timesteps = scheduler->timesteps().to(torch::kFloat64);
    for (std::int64_t i = 0; i < timesteps.size(0); ++i) {
      const double t = timesteps[i].item<double>();
      const auto model_output = x * 0.5 + c * (t / 1000.0);
      x = scheduler->step(model_output, t, x);
      samples.push_back(x);
    }
    out["prev_samples" + suffix] = torch::stack(samples);
  }
  return out;
}

}  // namespace omni::parity
