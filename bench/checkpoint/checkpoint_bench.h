// Real checkpoints at real size (issue 26), as programs:
//
// `omni bench load MODEL`: how fast omni turns a checkpoint into offload
// homes, against a raw sequential read() of the same files in the same run,
// each from a cold page cache (the files' pages dropped with
// posix_fadvise(DONTNEED) first) and again warm. Load is the whole engine
// start: headers, construction, weights (Note [Weights that alias the
// file]), homes (pinned, or mapped under a budget), on the sim device.
//
// `omni bench checkpoint`: writes a synthetic diffusers Wan directory with
// two bfloat16 experts at a size worth measuring (Wan2.1-1.3B-shaped, 2.8 GB
// each, random weights; text encoder, tokenizer, VAE and scheduler copied
// from models/tiny-shapes), then runs `omni generate DIR
// --enable-cpu-offload --device sim` as a child with and without
// `--host-memory-budget`, sampling the child's RssAnon (/proc/PID/status,
// which includes the sim device's memory) every few milliseconds. It
// prints peak RssAnon against the report's device peak + budget + 512 MiB,
// whether the frames are bitwise the same, and the load bench's figures.
// The directory is deleted afterwards unless --keep.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <ostream>
#include <string>

namespace omni::bench {

struct LoadBenchConfig {
  std::string model;
  std::string dtype = "auto";
  std::string host_memory_budget;  // "" for none
  std::string pinned_staging = "512MiB";
  bool cold = true;  // drop the files' pages before each cold run
  std::string json_path;
  void validate() const;
};

struct LoadBenchResult {
  std::uint64_t file_bytes = 0;    // every weight file, whole
  std::uint64_t weight_bytes = 0;  // the model's load bytes
  double raw_cold_seconds = 0, raw_warm_seconds = 0;
  double load_cold_seconds = 0, load_warm_seconds = 0;
  bool cold_measured = false;  // posix_fadvise could drop the pages
  std::string to_table() const;
  nlohmann::json to_json() const;
};

LoadBenchResult run_load_bench(const LoadBenchConfig& config, std::ostream& log);

struct CheckpointBenchConfig {
  std::filesystem::path dir = std::filesystem::temp_directory_path() / "omni-bench-checkpoint";
  std::filesystem::path tiny_shapes = "models/tiny-shapes";
  std::string omni_binary;  // default: this program
  int num_layers = 30;      // per expert; 30: Wan2.1-1.3B's shape (2.8 GB bf16)
  std::string host_memory_budget = "1GiB";
  std::string pinned_staging = "512MiB";
  bool keep = false;   // keep the directory afterwards
  bool reuse = false;  // use the directory a --keep run left instead of writing it
  std::string json_path;
  void validate() const;
};

struct CheckpointBenchResult {
  std::uint64_t expert_bytes = 0;
  std::uint64_t budget_bytes = 0;
  std::uint64_t peak_rss_anon_budget = 0, peak_rss_anon_unbudgeted = 0;
  std::uint64_t device_peak_budget = 0, device_peak_unbudgeted = 0;
  std::uint64_t pinned_budget = 0, pinned_unbudgeted = 0;
  bool frames_identical = false;
  LoadBenchResult load;
  std::uint64_t bound() const { return device_peak_budget + budget_bytes + (512ull << 20); }
  bool pass() const { return peak_rss_anon_budget <= bound() && frames_identical; }
  std::string to_table() const;
  nlohmann::json to_json() const;
};

CheckpointBenchResult run_checkpoint_bench(const CheckpointBenchConfig& config, std::ostream& log);

// Writes the synthetic directory (see above) into `dir`; returns the bytes of one expert.
std::uint64_t write_synthetic_wan(const std::filesystem::path& dir,
                                  const std::filesystem::path& tiny_shapes, int num_layers);

}  // namespace omni::bench
