#include "bench/soak/soak_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "bench/json_file.h"
#include "omni/device/device.h"
#include "omni/error.h"
#include "omni/omni.h"

namespace omni::bench {

namespace {

// Generation i repeats the request of generation i - kSeedCycle.
constexpr int kSeedCycle = 4;

std::uint64_t rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) {
      std::istringstream fields(line.substr(6));
      std::uint64_t kib = 0;
      fields >> kib;
      return kib * 1024;
    }
  throw FormatError("/proc/self/status: no VmRSS line (the soak needs Linux's /proc)");
}

std::string signed_bytes(std::int64_t bytes) {
  const auto magnitude =
      device::format_bytes(static_cast<std::uint64_t>(bytes < 0 ? -bytes : bytes));
  return (bytes < 0 ? "-" : "+") + magnitude;
}

std::int64_t delta(std::uint64_t to, std::uint64_t from) {
  return static_cast<std::int64_t>(to) - static_cast<std::int64_t>(from);
}

std::string row(const SoakSample& s, const SoakSample* baseline) {
  char buf[256];
  std::snprintf(
      buf, sizeof buf, "%10d  %12s  %12s  %14s  %12s  %9.3f  %s", s.generation,
      device::format_bytes(s.rss_bytes).c_str(), device::format_bytes(s.pinned_host_bytes).c_str(),
      device::format_bytes(s.device_allocated_bytes).c_str(),
      device::format_bytes(s.device_peak_bytes).c_str(), s.seconds,
      baseline ? ("RSS " + signed_bytes(delta(s.rss_bytes, baseline->rss_bytes)) + " since warm-up")
                     .c_str()
               : "baseline (after warm-up)");
  return buf;
}

}  // namespace

void SoakBenchConfig::validate() const {
  OMNI_CHECK(generations >= 1, ConfigError, "--generations must be at least 1, got ", generations);
  OMNI_CHECK(warmup >= 1 && warmup < generations, ConfigError,
             "--warmup must be in 1..generations-1 (", generations - 1, "), got ", warmup);
  OMNI_CHECK(interval >= 1, ConfigError, "--interval must be at least 1, got ", interval);
  OMNI_CHECK(rss_fraction >= 0 && rss_fraction < 1, ConfigError,
             "--rss-fraction must be in [0, 1), got ", rss_fraction);
  OMNI_CHECK(!prompt.empty(), ConfigError, "--prompt must not be empty");
  (void)device::parse_byte_size(sim_memory);
  (void)device::parse_byte_size(rss_slack);
}

nlohmann::json SoakSample::to_json() const {
  return {{"generation", generation},
          {"rss_bytes", rss_bytes},
          {"pinned_host_bytes", pinned_host_bytes},
          {"device_allocated_bytes", device_allocated_bytes},
          {"device_peak_bytes", device_peak_bytes},
          {"generation_seconds", seconds}};
}

std::int64_t SoakBenchResult::rss_growth_bytes() const {
  return delta(final_sample().rss_bytes, baseline().rss_bytes);
}

double SoakBenchResult::rss_slope_bytes_per_generation() const {
  if (samples.size() < 2) return 0;
  double mx = 0, my = 0;
  for (const auto& s : samples) {
    mx += s.generation;
    my += static_cast<double>(s.rss_bytes);
  }
  mx /= static_cast<double>(samples.size());
  my /= static_cast<double>(samples.size());
  double sxy = 0, sxx = 0;
  for (const auto& s : samples) {
    sxy += (s.generation - mx) * (static_cast<double>(s.rss_bytes) - my);
    sxx += (s.generation - mx) * (s.generation - mx);
  }
  return sxx > 0 ? sxy / sxx : 0;
}

std::string SoakBenchResult::verdict_line() const {
  const auto& b = baseline();
  const auto& f = final_sample();
  char slope[64];
  std::snprintf(slope, sizeof slope, "%.1f", rss_slope_bytes_per_generation() / 1024.0);
  std::ostringstream out;
  out << "soak: " << (pass ? "PASS" : "FAIL") << " after " << f.generation << " generations ("
      << config.warmup << " warm-up) on " << device << (simulated ? " (simulated)" : "") << ": RSS "
      << device::format_bytes(b.rss_bytes) << " -> " << device::format_bytes(f.rss_bytes) << " ("
      << signed_bytes(rss_growth_bytes()) << ", tolerance "
      << device::format_bytes(rss_tolerance_bytes) << ", slope " << slope
      << " KiB/generation); pinned host "
      << signed_bytes(delta(f.pinned_host_bytes, b.pinned_host_bytes)) << " ("
      << device::format_bytes(f.pinned_host_bytes) << "); device allocated "
      << signed_bytes(delta(f.device_allocated_bytes, b.device_allocated_bytes)) << ", device peak "
      << signed_bytes(delta(f.device_peak_bytes, b.device_peak_bytes)) << " ("
      << device::format_bytes(f.device_peak_bytes) << "); outputs "
      << (mismatched_outputs == 0 ? "identical to the first round"
                                  : std::to_string(mismatched_outputs) + " differed");
  return out.str();
}

nlohmann::json SoakBenchResult::to_json() const {
  nlohmann::json j;
  j["model"] = config.model;
  j["device"] = device;
  j["simulated"] = simulated;
  j["offload"] = config.offload;
  j["generations"] = config.generations;
  j["warmup"] = config.warmup;
  j["interval"] = config.interval;
  j["samples"] = nlohmann::json::array();
  for (const auto& s : samples) j["samples"].push_back(s.to_json());
  j["rss_growth_bytes"] = rss_growth_bytes();
  j["rss_tolerance_bytes"] = rss_tolerance_bytes;
  j["rss_slope_bytes_per_generation"] = rss_slope_bytes_per_generation();
  j["pinned_host_growth_bytes"] =
      delta(final_sample().pinned_host_bytes, baseline().pinned_host_bytes);
  j["device_allocated_growth_bytes"] =
      delta(final_sample().device_allocated_bytes, baseline().device_allocated_bytes);
  j["device_peak_growth_bytes"] =
      delta(final_sample().device_peak_bytes, baseline().device_peak_bytes);
  j["mismatched_outputs"] = mismatched_outputs;
  j["pass"] = pass;
  j["verdict"] = verdict_line();
  return j;
}

void SoakBenchResult::write_json(const std::string& path) const {
  write_json_file(path, to_json());
}

std::string soak_table_header() {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%10s  %12s  %12s  %14s  %12s  %9s  %s", "generation", "RSS",
                "pinned host", "device alloc", "device peak", "last [s]", "");
  return buf;
}

SoakBenchResult run_soak_bench(const SoakBenchConfig& config, std::ostream& out) {
  config.validate();
  EngineArgs args;
  args.model = config.model;
  args.device = config.device;
  args.enable_cpu_offload = config.offload;
  args.sim_memory_bytes = device::parse_byte_size(config.sim_memory);
  args.offload.quiet = true;
  Omni engine(args);

  SoakBenchResult result;
  result.config = config;
  result.device = engine.device().name();
  result.simulated = engine.device().is_stand_in();

  std::vector<torch::Tensor> first_round;
  const auto sample = [&](int generation, double seconds) {
    SoakSample s;
    s.generation = generation;
    s.rss_bytes = rss_bytes();
    s.pinned_host_bytes = engine.offload_report().pinned_host_bytes;
    const auto stats = engine.device().memory_stats();
    s.device_allocated_bytes = stats.allocated_bytes;
    s.device_peak_bytes = stats.peak_allocated_bytes;
    s.seconds = seconds;
    return s;
  };

  out << "soak: " << config.generations << " generations of " << config.model << " on "
      << result.device << (config.offload ? " with model-level offload" : " without offload")
      << (result.simulated ? " (simulated device)" : "") << "\n"
      << soak_table_header() << "\n";
  for (int i = 1; i <= config.generations; ++i) {
    GenerationRequest request;
    request.prompt = config.prompt;
    request.seed = config.base_seed + static_cast<std::uint64_t>((i - 1) % kSeedCycle);
    const auto start = std::chrono::steady_clock::now();
    auto generated = engine.generate(request);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (i <= kSeedCycle)
      first_round.push_back(generated.frames);
    else if (!torch::equal(generated.frames, first_round[(i - 1) % kSeedCycle]))
      ++result.mismatched_outputs;

    const bool at_baseline = i == config.warmup;
    const bool at_interval = i > config.warmup && ((i - config.warmup) % config.interval == 0 ||
                                                   i == config.generations);
    if (!at_baseline && !at_interval) continue;
    result.samples.push_back(sample(i, seconds));
    out << row(result.samples.back(), at_baseline ? nullptr : &result.samples.front()) << "\n"
        << std::flush;
  }

  const auto& b = result.baseline();
  const auto& f = result.final_sample();
  result.rss_tolerance_bytes =
      std::max(device::parse_byte_size(config.rss_slack),
               static_cast<std::uint64_t>(config.rss_fraction * static_cast<double>(b.rss_bytes)));
  result.pass =
      result.rss_growth_bytes() <= static_cast<std::int64_t>(result.rss_tolerance_bytes) &&
      f.pinned_host_bytes == b.pinned_host_bytes &&
      f.device_allocated_bytes == b.device_allocated_bytes &&
      f.device_peak_bytes == b.device_peak_bytes && result.mismatched_outputs == 0;
  if (!config.json_path.empty()) result.write_json(config.json_path);
  return result;
}

}  // namespace omni::bench
