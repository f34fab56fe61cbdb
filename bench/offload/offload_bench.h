// `omni bench offload`: the cost of swapping a pipeline's components between
// host and device, measured in one process for our backend, faithful
// reproductions of today's movers (strategies.h) and the raw link.
//
//   omni::bench::OffloadBenchConfig config;
//   config.device = "cuda:0";
//   config.validate();
//   auto result = omni::bench::run_offload_bench(config, std::cerr);  // progress on stderr
//   std::cout << result.to_table();
//   result.write_json("bench.json");
//
// Schedule: per request, every component of the profile runs once in order
// (encoder → high-noise expert → low-noise expert → VAE); "running" one is
// touching a few of its weights on the compute device, so the time is
// movement. The expert swap (high → low expert) is the headline: the same
// bytes in every strategy, the swap a real Wan2.2 request makes mid-denoise.
//
// Samples: each repeat builds the weights afresh, enables the strategy
// (timed: the cold start) and runs the requests. Per-request and per-swap
// figures come from the warm requests (the 2nd onward) of every repeat;
// medians with min and max. Raw copies are repeated the same way.
//
// On the sim device every "transfer" is a host memcpy: its figures are
// labelled simulated and the targets are only meaningful on a GPU.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "bench/offload/weight_profile.h"

namespace omni::bench {

enum class StrategyKind {
  raw,
  all_resident,
  omni,
  omni_streamed,
  omni_budget,
  omni_layerwise,
  copy_back,
  accelerate
};
std::string_view to_string(StrategyKind kind);

struct OffloadBenchConfig {
  std::string profile = "wan2.2-t2v-a14b";
  std::string scale;  // "" chooses: 1 on cuda, ≤ 1 GB of weights on sim
  int requests = 4;   // per repeat; the first is the cold one
  int repeats = 3;
  std::string device = "auto";  // auto: cuda:0 when present, else sim
  std::vector<std::string> strategies = {"omni", "copy-back", "accelerate", "raw"};
  std::string sim_memory = "64GiB";
  // The sim device's link speed in GB/s (Note [The sim link]). Above 0 (or on
  // a GPU), requests run with modeled compute (Note [Modeled compute]).
  double sim_link_gbps = 0;
  int steps = 8;  // denoising steps of a modeled request
  // omni-budget's --device-memory-budget: a size ("300MiB") or a share of
  // the (scaled) weights ("60%").
  std::string device_memory_budget = "60%";
  std::string json_path;  // rewritten after every strategy when set
  bool plan_only = false;
  std::uint64_t seed = 7;

  // ConfigError naming the option for values that cannot work.
  void validate() const;
  // The selected strategies in run order (raw first: the others are compared to it).
  std::vector<StrategyKind> strategy_kinds() const;
};

struct Stats {
  double median = 0, min = 0, max = 0;
  std::size_t count = 0;
  static Stats of(std::vector<double> samples);
  nlohmann::json to_json() const;
};

struct SwapSample {
  std::string component;
  double seconds = 0;  // the phase boundary, until the device is idle
  std::uint64_t h2d_bytes = 0, d2h_bytes = 0;
};

struct RequestSample {
  double seconds = 0;           // the whole request
  double transfer_seconds = 0;  // its phase boundaries (and end-of-request offload)
  // Transfer compute waited for: the backend's record, or for strategies
  // whose copies block, transfer_seconds.
  double exposed_transfer_seconds = 0;
  std::optional<double> device_timed_seconds;
  std::uint64_t h2d_bytes = 0, d2h_bytes = 0;
  std::vector<SwapSample> swaps;
};

struct RepeatSample {
  double enable_seconds = 0;
  std::uint64_t enable_h2d_bytes = 0, enable_d2h_bytes = 0;
  std::vector<RequestSample> requests;
  std::uint64_t peak_device_bytes = 0;
  std::uint64_t pinned_peak_bytes = 0, pageable_peak_bytes = 0;
  std::optional<std::uint64_t> rss_peak_bytes;
};

struct StrategyReport {
  std::string name;           // raw-pinned, raw-pageable, omni, copy-back, accelerate
  std::string status = "ok";  // ok | skipped | failed
  std::string reason;
  std::uint64_t planned_host_bytes = 0, planned_device_bytes = 0;
  std::vector<RepeatSample> repeats;

  // Summaries (from the samples).
  std::uint64_t expert_swap_bytes = 0;
  Stats expert_swap_seconds, expert_swap_gbps;
  std::optional<double> ratio_to_raw_pinned;  // raw pinned seconds / these seconds
  bool has_requests = true;                   // false for raw
  Stats request_seconds, request_transfer_seconds, request_exposed_seconds, swap_seconds;
  std::optional<Stats> request_device_timed_seconds;
  std::uint64_t h2d_bytes_per_request = 0, d2h_bytes_per_request = 0;
  std::uint64_t h2d_bytes_total = 0, d2h_bytes_total = 0;
  std::uint64_t peak_device_bytes = 0, pinned_peak_bytes = 0, pageable_peak_bytes = 0;
  std::optional<std::uint64_t> rss_peak_bytes;
  Stats enable_seconds, first_request_seconds, cold_start_seconds;

  nlohmann::json to_json() const;
};

struct TargetCheck {
  std::string name;
  std::string measured;
  std::string target;
  std::optional<bool> pass;  // nullopt: could not be evaluated (a strategy missing)
};

struct ComponentInfo {
  std::string name, class_name, role;
  std::int64_t parameters = 0, full_parameters = 0;
  std::uint64_t bytes = 0, full_bytes = 0;
  std::size_t tensors = 0;
};

struct OffloadBenchResult {
  std::string profile, description, device;
  bool simulated = false;
  Scale scale;
  std::string scale_reason;
  std::string dtype;
  int requests = 0, repeats = 0;
  std::vector<ComponentInfo> components;
  std::uint64_t total_bytes = 0, swappable_bytes = 0, expert_bytes = 0;
  // max(encoders, largest DiT) + VAE, and the largest block group offload moves.
  std::uint64_t model_level_planned_peak_bytes = 0, largest_block_bytes = 0;
  std::uint64_t device_memory_budget_bytes = 0;  // omni-budget's
  // The fewest bytes any whole-component eviction order uploads for one
  // repeat's requests under that budget, enable included (Note [Residency
  // policies]); 0 when omni-budget is not run.
  std::uint64_t budget_minimum_h2d_bytes = 0;
  double sim_link_gbps = 0;
  std::string compute_model;               // empty: movement only
  std::vector<std::string> request_calls;  // a modeled request's component calls
  std::string expert;                      // the component whose arrival is the expert swap
  std::uint64_t host_available_bytes = 0, device_capacity_bytes = 0;
  bool plan_only = false;
  bool complete = false;
  std::vector<StrategyReport> strategies;
  std::vector<TargetCheck> targets;
  std::vector<std::string> notes;

  const StrategyReport* strategy(std::string_view name) const;
  nlohmann::json to_json() const;
  std::string to_table() const;
  // Writes to_json() to `path` (through a temporary file, so a reader never
  // sees half a document). FormatError when the file cannot be written.
  void write_json(const std::string& path) const;
};

// Resolves the profile, scale and device and plans every strategy; allocates
// no weights.
OffloadBenchResult plan_offload_bench(const OffloadBenchConfig& config);

// Plans, then runs every selected strategy one after the other on one device
// (each with nothing else resident), writing progress lines to `progress`.
// A strategy that cannot fit is skipped with the reason; one that fails is
// reported as failed and the others still run.
OffloadBenchResult run_offload_bench(const OffloadBenchConfig& config, std::ostream& progress);

}  // namespace omni::bench
