// Reading a diffusers model directory (model_directory.h).
#include "pipelines/model_directory.h"

#include <algorithm>

#include "omni/io/checkpoint.h"

namespace fs = std::filesystem;

namespace omni::pipelines::internal {

ComponentEntry read_entry(io::ConfigReader& reader, const nlohmann::json& index,
                          const std::string& name) {
  ComponentEntry entry{name, std::nullopt, std::nullopt};
  reader.ignore({name});
  if (!index.contains(name) || index.at(name).is_null()) return entry;
  const auto& value = index.at(name);
  const auto bad = [&] {
    return ConfigError(detail::concat(reader.source(), ": field '", name,
                                      "' must be [library, class] (or [null, null]), got ",
                                      value.dump()));
  };
  if (!value.is_array() || value.size() != 2) throw bad();
  for (const auto& part : value)
    if (!part.is_null() && !part.is_string()) throw bad();
  if (value[0].is_string()) entry.library = value[0].get<std::string>();
  if (value[1].is_string()) entry.class_name = value[1].get<std::string>();
  return entry;
}

void expect_class(const ComponentEntry& entry, const std::string& source,
                  const std::string& pipeline, const std::vector<std::string>& accepted) {
  if (!entry.present()) return;
  const bool ok = std::find(accepted.begin(), accepted.end(), *entry.class_name) != accepted.end();
  std::string list;
  for (const auto& a : accepted) list += (list.empty() ? "" : ", ") + a;
  OMNI_CHECK(ok, ConfigError, source, ": component '", entry.name, "' has class '",
             *entry.class_name, "'; ", pipeline, " supports ", list);
}

void require_entry(const ComponentEntry& entry, const std::string& source) {
  OMNI_CHECK(entry.present(), ConfigError, source, ": component '", entry.name,
             "' is required (it is null or absent)");
}

fs::path component_dir(const fs::path& dir, const std::string& name) {
  const auto folder = dir / name;
  OMNI_CHECK(fs::is_directory(folder), FormatError, folder.string(), ": component folder '", name,
             "' is missing (model_index.json lists it)");
  return folder;
}

fs::path component_file(const fs::path& folder, const std::string& name,
                        const std::vector<std::string>& candidates) {
  for (const auto& c : candidates)
    if (fs::is_regular_file(folder / c)) return folder / c;
  std::string list;
  for (const auto& c : candidates) list += (list.empty() ? "" : " or ") + c;
  throw FormatError(detail::concat(folder.string(), ": component '", name, "' has no ", list));
}

torch::ScalarType component_dtype(const DtypeSpec& spec, const std::string& component,
                                  const io::Checkpoint& checkpoint, bool is_vae) {
  if (const auto chosen = spec.for_component(component, is_vae)) return *chosen;
  const auto stored = checkpoint.stored_dtype().value_or(torch::kFloat32);
  OMNI_CHECK(stored == torch::kFloat32 || stored == torch::kBFloat16 || stored == torch::kFloat16,
             ConfigError, checkpoint.label(), ": stored in ", dtype_name(stored),
             ", which omni does not compute in; choose one with --dtype ", component,
             "=float32|bfloat16|float16");
  return stored;
}

LoadedComponent<models::wan::WanTransformer3DModel> load_wan_transformer(
    const fs::path& folder, const std::string& name,
    const models::wan::WanTransformer3DConfig& config, const DtypeSpec& spec) {
  return for_component(name, [&] {
    const auto checkpoint = io::Checkpoint::open_dir(folder, "diffusion_pytorch_model");
    const auto dtype = component_dtype(spec, name, checkpoint);
    auto model = construct_in<models::wan::WanTransformer3DModel>(dtype, config);
    model->to_inference_dtype(dtype);  // before loading: no float32 copy of the weights
    model->load_weights(checkpoint, {.copy = {}, .alias_mapping = true});
    return LoadedComponent<models::wan::WanTransformer3DModel>{model, dtype};
  });
}

LoadedComponent<models::wan::AutoencoderKLWan> load_wan_vae(
    const fs::path& folder, const models::wan::AutoencoderKLWanConfig& config,
    const LoadOptions& options) {
  return for_component("vae", [&] {
    const auto checkpoint = io::Checkpoint::open_dir(folder, "diffusion_pytorch_model");
    const auto dtype = component_dtype(options.dtype, "vae", checkpoint, /*is_vae=*/true);
    auto model = construct_in<models::wan::AutoencoderKLWan>(dtype, config);
    io::load_state_dict(*model, checkpoint, {}, {.copy = {}, .alias_mapping = true});
    models::wan::VaeTiling tiling;
    tiling.enabled = options.vae_tiling;
    model->set_tiling(tiling);
    return LoadedComponent<models::wan::AutoencoderKLWan>{model, dtype};
  });
}

io::Tokenizer load_tokenizer(const fs::path& folder, std::int64_t vocab_size,
                             const std::string& source, const std::string& embedder) {
  auto tokenizer = for_component("tokenizer", [&] {
    return io::Tokenizer::from_file(component_file(folder, "tokenizer", {"spiece.model"}));
  });
  OMNI_CHECK(tokenizer.vocab_size() <= vocab_size, ConfigError, source, ": the tokenizer has ",
             tokenizer.vocab_size(), " pieces but the ", embedder, " embeds only ", vocab_size);
  return tokenizer;
}

SchedulerConfig read_scheduler_config(const fs::path& folder, const ComponentEntry& entry,
                                      const std::string& source) {
  const auto path = component_file(folder, "scheduler", {"scheduler_config.json", "config.json"});
  SchedulerConfig s{io::read_json_file(path), path.string(), 1000};
  const auto probe = schedulers::make_scheduler(s.config, s.source);
  OMNI_CHECK(probe->class_name() == *entry.class_name, ConfigError, source,
             ": model_index.json names scheduler class '", *entry.class_name, "' but ", s.source,
             " is a ", probe->class_name());
  s.num_train_timesteps = probe->num_train_timesteps();
  return s;
}

// Note [omni_defaults.json]
// A diffusers directory says nothing about the size a model was trained for,
// and WanPipeline.__call__'s defaults (832×480, 81 frames) suit only the real
// Wan2.2. An optional omni_defaults.json next to model_index.json sets this
// model's request defaults: any of steps, guidance_scale, guidance_scale_2,
// width, height, num_frames, fps. diffusers ignores the file. Unknown fields
// and values a request could not use are ConfigErrors naming the file.
// WanPipeline and OmniUnifiedPipeline read it the same way (a single
// generator has no use for guidance_scale_2).
WanDefaults read_request_defaults(const fs::path& path, WanDefaults d, bool single_denoiser) {
  const auto json = io::read_json_file(path);
  OMNI_CHECK(json.is_object(), ConfigError, path.string(), ": expected a JSON object");
  io::ConfigReader reader(json, path.string());
  d.steps = reader.optional<int>("steps", d.steps);
  d.guidance_scale = reader.optional<double>("guidance_scale", d.guidance_scale);
  if (!single_denoiser)
    d.guidance_scale_2 = reader.optional<double>("guidance_scale_2", d.guidance_scale_2);
  d.width = reader.optional<int>("width", d.width);
  d.height = reader.optional<int>("height", d.height);
  d.num_frames = reader.optional<int>("num_frames", d.num_frames);
  d.fps = reader.optional<int>("fps", d.fps);
  reader.finish();
  return d;
}

void check_request_defaults(const Pipeline& pipeline, const fs::path& defaults_path) {
  try {
    GenerationRequest probe;
    probe.prompt = "omni_defaults.json";
    pipeline.resolve(probe);
  } catch (const InvalidRequest& e) {
    throw ConfigError(detail::concat(defaults_path.string(), ": ", e.what()));
  }
}

}  // namespace omni::pipelines::internal
