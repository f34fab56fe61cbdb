// Fixture folders and the tolerance table.
#include <regex>

#include "omni/io/json_config.h"
#include "omni/io/safetensors.h"
#include "parity/parity.h"

namespace fs = std::filesystem;

namespace omni::parity {

namespace {

constexpr const char* kF32Suffix = ".f32";

std::map<std::string, torch::Tensor> read_tensors(const fs::path& path) {
  if (!fs::is_regular_file(path))
    throw FixtureError(path.string() + ": missing (every fixture stores its inputs and outputs)");
  std::map<std::string, torch::Tensor> out;
  for (auto& [name, tensor] : io::load_safetensors(path)) out.emplace(name, tensor);
  return out;
}

// The class named by a config: `_class_name` (diffusers) or the single entry
// of `architectures` (transformers).
std::optional<std::string> class_of(const nlohmann::json& config) {
  if (!config.is_object()) return std::nullopt;
  if (config.contains("_class_name") && config["_class_name"].is_string())
    return config["_class_name"].get<std::string>();
  if (config.contains("architectures") && config["architectures"].is_array() &&
      config["architectures"].size() == 1 && config["architectures"][0].is_string())
    return config["architectures"][0].get<std::string>();
  return std::nullopt;
}

}  // namespace

Fixture Fixture::open(const fs::path& dir) {
  if (!fs::is_directory(dir)) throw FixtureError(dir.string() + ": not a directory");
  Fixture f;
  f.dir_ = dir;
  for (const char* file : {"config.json", "model_index.json"}) {
    const auto path = dir / file;
    if (!fs::is_regular_file(path)) continue;
    auto json = io::read_json_file(path);
    if (auto kind = class_of(json)) {
      f.kind_ = *kind;
      f.config_ = std::move(json);
      f.config_path_ = path;
      break;
    }
  }
  if (f.kind_.empty())
    throw FixtureError(dir.string() +
                       ": neither config.json nor model_index.json names a class "
                       "('_class_name' or 'architectures')");
  f.inputs_ = read_tensors(dir / "inputs.safetensors");
  f.outputs_ = read_tensors(dir / "outputs.safetensors");
  return f;
}

const torch::Tensor& Fixture::input(const std::string& name) const {
  auto it = inputs_.find(name);
  if (it == inputs_.end())
    throw FixtureError((dir_ / "inputs.safetensors").string() + ": no input '" + name + "'");
  return it->second;
}

std::vector<std::string> Fixture::output_names() const {
  std::vector<std::string> names;
  for (const auto& [name, tensor] : outputs_)
    if (!name.ends_with(kF32Suffix)) names.push_back(name);
  return names;
}

const torch::Tensor& Fixture::output(const std::string& name) const {
  auto it = outputs_.find(name);
  if (it == outputs_.end())
    throw FixtureError((dir_ / "outputs.safetensors").string() + ": no output '" + name + "'");
  return it->second;
}

std::optional<torch::Tensor> Fixture::output_f32(const std::string& name) const {
  auto it = outputs_.find(name + kF32Suffix);
  if (it == outputs_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> known_kinds() {
  return {"AutoencoderKLWan", "FlowMatchEulerDiscreteScheduler",
          "UMT5EncoderModel", "UniPCMultistepScheduler",
          "WanPipeline",      "WanTransformer3DModel"};
}

std::optional<Tolerance> tolerance_for(const std::string& kind, const std::string& name) {
  // tests/data/wan/README.md, the "Tolerance" paragraphs of §1–§5.
  struct Row {
    const char* kind;
    const char* output;  // `_N`: any step count
    Tolerance tolerance;
  };
  constexpr Metric kExact = Metric::exact, kAbs = Metric::absolute, kRel = Metric::relative;
  static const std::vector<Row> table = {
      {"WanTransformer3DModel", "sample", {kAbs, 1e-4}},
      {"WanTransformer3DModel", "sample_timestep_per_token", {kAbs, 1e-4}},
      {"AutoencoderKLWan", "decoded", {kAbs, 2e-4}},
      {"AutoencoderKLWan", "encoded_mean", {kAbs, 1e-4}},
      {"AutoencoderKLWan", "encoded_logvar", {kAbs, 1e-4}},
      {"UMT5EncoderModel", "last_hidden_state", {kAbs, 1e-4}},
      {"UniPCMultistepScheduler", "timesteps_N", {kExact, 0}},
      {"UniPCMultistepScheduler", "sigmas_N", {kAbs, 1e-6}},
      {"UniPCMultistepScheduler", "prev_samples_N", {kAbs, 1e-5, true}},
      {"FlowMatchEulerDiscreteScheduler", "timesteps_N", {kRel, 1e-6}},
      {"FlowMatchEulerDiscreteScheduler", "sigmas_N", {kAbs, 1e-6}},
      {"FlowMatchEulerDiscreteScheduler", "prev_samples_N", {kAbs, 1e-5, true}},
      {"WanPipeline", "timesteps", {kExact, 0}},
      // §5 gives no sigma tolerance; §4's schedule tolerance applies.
      {"WanPipeline", "sigmas", {kAbs, 1e-6}},
      {"WanPipeline", "expert_index", {kExact, 0}},
      {"WanPipeline", "guidance_scale_per_step", {kExact, 0}},
      {"WanPipeline", "step_timestep", {kExact, 0, true}},
      // The full loop's trajectory: step_latents_in[i + 1] = step_latents_out[i].
      {"WanPipeline", "step_latents_in", {kAbs, 1e-4, true}},
      // Isolated: the expert fed the stored step_latents_in[i].
      {"WanPipeline", "step_noise_pred_cond", {kAbs, 1e-4, true}},
      {"WanPipeline", "step_noise_pred_uncond", {kAbs, 1e-4, true}},
      {"WanPipeline", "step_noise_pred", {kAbs, 1e-4, true}},
      {"WanPipeline", "step_latents_out", {kAbs, 1e-4, true}},
      {"WanPipeline", "latents", {kAbs, 1e-4}},
      {"WanPipeline", "decoder_input", {kAbs, 2e-4}},
      {"WanPipeline", "video", {kAbs, 5e-4}},
  };
  static const std::regex step_count("^(.*)_[0-9]+$");
  std::smatch m;
  const std::string family = std::regex_match(name, m, step_count) ? m[1].str() + "_N" : "";
  for (const auto& row : table)
    if (kind == row.kind && (name == row.output || family == row.output)) return row.tolerance;
  return std::nullopt;
}

}  // namespace omni::parity
