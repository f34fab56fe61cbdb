// `omni bench soak`: many generations in one process with offload on, to show
// that nothing accumulates — resident memory, pinned host memory and device
// memory stay flat after warm-up, and the outputs do not drift.
//
//   omni::bench::SoakBenchConfig config;            // 200 generations of example:wan-shaped on sim
//   config.validate();
//   auto result = omni::bench::run_soak_bench(config, std::cout);  // one row per sample, live
//   std::cout << result.verdict_line() << "\n";
//   result.write_json("bench-soak.json");
//
// Schedule: one omni::Omni for the whole run; generation i (1-based) uses
// seed base_seed + (i - 1) % kSeedCycle, so every later generation repeats
// one of the first round's requests and must give the same frames. After
// `warmup` generations the baseline is sampled; then every `interval`
// generations and after the last one. Figures: VmRSS from /proc/self/status,
// the backend's pinned host bytes, and the device's allocated and peak bytes.
//
// Verdict: pass when pinned host bytes, device bytes and device peak equal
// the baseline's at the end, every output matched, and RSS grew by at most
// max(rss_slack, rss_fraction × baseline RSS) from the baseline.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace omni::bench {

struct SoakBenchConfig {
  std::string model = "example:wan-shaped";
  std::string device = "sim";  // sim | cuda[:N] | cpu (cpu has no offload)
  bool offload = true;
  int generations = 200;
  int warmup = 10;    // generations before the baseline sample
  int interval = 20;  // generations between samples
  std::string prompt = "a red circle moving right on a black background";
  std::uint64_t base_seed = 7;
  std::string sim_memory = "64GiB";
  std::string rss_slack = "8MiB";  // RSS growth always tolerated (allocator noise)
  double rss_fraction = 0.02;      // … or this fraction of the baseline RSS, if larger
  std::string json_path;           // written at the end when set

  // ConfigError naming the option for values that cannot work.
  void validate() const;
};

struct SoakSample {
  int generation = 0;  // generations completed when sampled
  std::uint64_t rss_bytes = 0;
  std::uint64_t pinned_host_bytes = 0;
  std::uint64_t device_allocated_bytes = 0;
  std::uint64_t device_peak_bytes = 0;
  double seconds = 0;  // the last generation's wall time
  nlohmann::json to_json() const;
};

struct SoakBenchResult {
  SoakBenchConfig config;
  std::string device;  // as the engine names it ("sim", "cuda:0")
  bool simulated = false;
  std::vector<SoakSample> samples;  // samples[0] is the baseline (after warm-up)
  int mismatched_outputs = 0;       // later generations whose frames differed from round one
  std::uint64_t rss_tolerance_bytes = 0;
  bool pass = false;

  const SoakSample& baseline() const { return samples.front(); }
  const SoakSample& final_sample() const { return samples.back(); }
  // RSS growth from the baseline to the end, in bytes (negative when it shrank).
  std::int64_t rss_growth_bytes() const;
  // Least-squares slope of RSS over the samples, bytes per generation.
  double rss_slope_bytes_per_generation() const;
  // "soak: PASS …" / "soak: FAIL …" with every measured growth.
  std::string verdict_line() const;
  nlohmann::json to_json() const;
  // Through a temporary file; FormatError when it cannot be written.
  void write_json(const std::string& path) const;
};

// The header of the rows run_soak_bench prints.
std::string soak_table_header();

// Runs the soak, writing the header and one row per sample to `out` as they
// are measured. Errors from the engine propagate (a soak that cannot run
// has no verdict).
SoakBenchResult run_soak_bench(const SoakBenchConfig& config, std::ostream& out);

}  // namespace omni::bench
