// omni-parity: runs the port on a reference fixture (tests/data/wan/README.md)
// and compares every stored output with its float64 key.
//
//   omni-parity tests/data/wan/wan_pipeline          # exit 0: every output within tolerance
//
// A fixture folder holds config.json (or model_index.json), weights, inputs.safetensors and
// outputs.safetensors. Its kind is the config's class name; a runner builds that class from
// the config with the project's parser, loads the weights with the project's strict loader,
// runs the README's call in float32 and returns what it computed, by output name. The
// tolerances come from this tool's table (README values), never from the fixture.
#pragma once

#include <torch/types.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace omni::parity {

// A fixture that cannot be run (unreadable file, unknown kind, inconsistent
// arguments). Errors of the port itself (a missing weight key) keep their
// omni type; both end the run with a message.
class FixtureError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Fixture {
 public:
  // Reads the folder's config and finds its kind; FixtureError when neither
  // config.json nor model_index.json names a class.
  static Fixture open(const std::filesystem::path& dir);

  const std::filesystem::path& dir() const { return dir_; }
  // "WanTransformer3DModel", "AutoencoderKLWan", "UMT5EncoderModel",
  // "FlowMatchEulerDiscreteScheduler", "UniPCMultistepScheduler", "WanPipeline", ...
  const std::string& kind() const { return kind_; }
  // The JSON file the kind came from, and its path.
  const nlohmann::json& config() const { return config_; }
  const std::filesystem::path& config_path() const { return config_path_; }

  // inputs.safetensors: every tensor, owned, float32 as stored.
  bool has_input(const std::string& name) const { return inputs_.count(name) != 0; }
  // FixtureError naming the key when absent.
  const torch::Tensor& input(const std::string& name) const;
  // outputs.safetensors: the float64-reference keys (no `.f32` suffix), sorted.
  std::vector<std::string> output_names() const;
  bool has_output(const std::string& name) const { return outputs_.count(name) != 0; }
  const torch::Tensor& output(const std::string& name) const;
  // The `.f32` twin of an output, when stored.
  std::optional<torch::Tensor> output_f32(const std::string& name) const;

 private:
  std::filesystem::path dir_;
  std::string kind_;
  nlohmann::json config_;
  std::filesystem::path config_path_;
  std::map<std::string, torch::Tensor> inputs_;
  std::map<std::string, torch::Tensor> outputs_;
};

enum class Metric {
  exact,     // every value equal (after rounding ours to float32, the stored precision)
  absolute,  // max |ours − reference|
  relative,  // max |ours − reference| / |reference|
};

struct Tolerance {
  Metric metric = Metric::absolute;
  double limit = 0;
  // The first axis enumerates steps; the report names the worst one.
  bool per_step = false;
};

// The README's tolerance for output `name` of fixture kind `kind`. Names with a
// step-count suffix (`timesteps_8`) match their family (`timesteps_N`).
// std::nullopt when the table has no entry (the output then fails).
std::optional<Tolerance> tolerance_for(const std::string& kind, const std::string& name);

// The kinds this tool can run.
std::vector<std::string> known_kinds();

struct RunOptions {
  torch::Device device = torch::kCPU;
};

// What a runner computed, by output name, on the CPU in float32 (or int64 / float64 for
// schedules).
using Computed = std::map<std::string, torch::Tensor>;

Computed run_transformer(const Fixture& fixture, const RunOptions& options);
Computed run_vae(const Fixture& fixture, const RunOptions& options);
Computed run_umt5(const Fixture& fixture, const RunOptions& options);
Computed run_scheduler(const Fixture& fixture, const RunOptions& options);
Computed run_pipeline(const Fixture& fixture, const RunOptions& options);

// One line of the report.
struct Check {
  std::string name;
  std::vector<std::int64_t> shape;  // the stored output's
  Tolerance tolerance;
  bool has_tolerance = false;
  double error = 0;
  std::optional<std::int64_t> worst_step;
  std::optional<double> reference_f32_error;  // the stored .f32 twin, same metric
  std::string problem;                        // why it failed without a number
  bool ok() const;
};

// Compares every stored output of `fixture` with `computed`.
std::vector<Check> compare(const Fixture& fixture, const Computed& computed);

// Prints the table; returns true when every check is ok.
bool print_report(std::ostream& out, const Fixture& fixture, const std::vector<Check>& checks);

}  // namespace omni::parity
