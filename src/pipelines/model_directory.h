// Reading a diffusers model directory, for the pipelines' loaders
// (wan_pipeline_loader.cpp, omni_unified_pipeline_loader.cpp): the
// `"name": [library, class]` entries of model_index.json, component folders
// and files, configs, the Wan components' weights, the tokenizer, the
// scheduler config and omni_defaults.json. Every error names the part of the
// directory at fault. Internal to src/pipelines.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "omni/error.h"
#include "omni/io/json_config.h"
#include "omni/io/tokenizer.h"
#include "omni/models/wan/autoencoder_kl_wan.h"
#include "omni/models/wan/wan_transformer.h"
#include "omni/pipelines/pipeline.h"
#include "omni/pipelines/wan_video_stages.h"

namespace omni::pipelines::internal {

// One `"name": [library, class]` entry of model_index.json; absent when the
// key is missing or both are null (diffusers' way of saving None).
struct ComponentEntry {
  std::string name;
  std::optional<std::string> library;
  std::optional<std::string> class_name;
  bool present() const { return class_name.has_value(); }
};

// Reads entry `name` (and marks it read in `reader`); ConfigError naming it
// when it is not [library, class] or [null, null].
ComponentEntry read_entry(io::ConfigReader& reader, const nlohmann::json& index,
                          const std::string& name);

// ConfigError unless an entry that is present has one of the `accepted`
// classes; the message says which classes `pipeline` supports.
void expect_class(const ComponentEntry& entry, const std::string& source,
                  const std::string& pipeline, const std::vector<std::string>& accepted);

// ConfigError when a component the pipeline needs is null or absent.
void require_entry(const ComponentEntry& entry, const std::string& source);

// The folder of a listed component; FormatError naming it when missing.
std::filesystem::path component_dir(const std::filesystem::path& dir, const std::string& name);

// The first of `candidates` inside `folder`; FormatError naming the component otherwise.
std::filesystem::path component_file(const std::filesystem::path& folder, const std::string& name,
                                     const std::vector<std::string>& candidates);

// Runs `load`, prefixing any FormatError/ConfigError with the component's name
// so that the message says which part of the directory is at fault.
template <typename Fn>
auto for_component(const std::string& name, Fn&& load) {
  try {
    return load();
  } catch (const FormatError& e) {
    throw FormatError(detail::concat("component '", name, "': ", e.what()));
  } catch (const ConfigError& e) {
    throw ConfigError(detail::concat("component '", name, "': ", e.what()));
  }
}

// Note [Constructing in the inference dtype]: torch::nn layers allocate and
// initialise their weights in the default dtype when they are constructed.
// Building a bfloat16 expert in float32 and converting it afterwards would
// hold twice its final size (57 GB for one 14B expert) for nothing, since the
// checkpoint overwrites every value; so the default dtype is the inference
// dtype while a component is constructed. Buffers the models compute at
// construction (RoPE tables) name their dtypes explicitly. Loading happens
// before the engine serves, on one thread.
class DefaultDtypeScope {
 public:
  explicit DefaultDtypeScope(torch::ScalarType dtype) : saved_(c10::get_default_dtype()) {
    c10::set_default_dtype(c10::scalarTypeToTypeMeta(dtype));
  }
  ~DefaultDtypeScope() { c10::set_default_dtype(saved_); }
  DefaultDtypeScope(const DefaultDtypeScope&) = delete;
  DefaultDtypeScope& operator=(const DefaultDtypeScope&) = delete;
  DefaultDtypeScope(DefaultDtypeScope&&) = delete;
  DefaultDtypeScope& operator=(DefaultDtypeScope&&) = delete;

 private:
  caffe2::TypeMeta saved_;
};

template <typename Model, typename Config>
Model construct_in(torch::ScalarType dtype, const Config& config) {
  DefaultDtypeScope scope(dtype);
  return Model(config);
}

// `folder`/config.json read as `Config` (its from_file), errors prefixed with
// the component's name.
template <typename Config>
Config read_config(const std::filesystem::path& folder, const std::string& name) {
  return for_component(
      name, [&] { return Config::from_file(component_file(folder, name, {"config.json"})); });
}

// A component and the dtype it was loaded in.
template <typename Model>
struct LoadedComponent {
  Model model;
  torch::ScalarType dtype;
};

// The dtype `component` loads in: `spec`'s choice, else the checkpoint's
// stored dtype, float32 when it stores no floating-point tensor (Note [Dtype
// from the checkpoint], dtype_spec.h).
torch::ScalarType component_dtype(const DtypeSpec& spec, const std::string& component,
                                  const io::Checkpoint& checkpoint, bool is_vae = false);

// The WanTransformer3DModel `name` built in its dtype (component_dtype; Note
// [Constructing in the inference dtype]) and loaded from `folder`'s
// diffusion_pytorch_model weights.
LoadedComponent<models::wan::WanTransformer3DModel> load_wan_transformer(
    const std::filesystem::path& folder, const std::string& name,
    const models::wan::WanTransformer3DConfig& config, const DtypeSpec& spec);

// The VAE from `folder`, in its dtype (component_dtype: the real Wan VAE is
// stored in float32, as diffusers' Wan examples load it).
// Tiled when `options.vae_tiling` (Note [Tiled VAE]).
LoadedComponent<models::wan::AutoencoderKLWan> load_wan_vae(
    const std::filesystem::path& folder, const models::wan::AutoencoderKLWanConfig& config,
    const LoadOptions& options);

// tokenizer/spiece.model of the component folder `folder`; ConfigError when
// it has more pieces than `vocab_size` embedding rows (`embedder` names them).
io::Tokenizer load_tokenizer(const std::filesystem::path& folder, std::int64_t vocab_size,
                             const std::string& source, const std::string& embedder);

// The scheduler's config (scheduler_config.json or config.json), checked by
// building a scheduler from it and comparing its class with model_index.json's.
struct SchedulerConfig {
  nlohmann::json config;
  std::string source;  // the file, for messages
  int num_train_timesteps = 1000;
};
SchedulerConfig read_scheduler_config(const std::filesystem::path& folder,
                                      const ComponentEntry& entry, const std::string& source);

// Note [omni_defaults.json] (model_directory.cpp): `base` overridden by the
// file at `path`. With `single_denoiser`, a guidance_scale_2 in it is a
// ConfigError (nothing would use it).
WanDefaults read_request_defaults(const std::filesystem::path& path, WanDefaults base,
                                  bool single_denoiser = false);

// A request that sets nothing but a prompt must be valid with the defaults
// the file set: ConfigError naming `defaults_path` with resolve()'s reason.
void check_request_defaults(const Pipeline& pipeline, const std::filesystem::path& defaults_path);

}  // namespace omni::pipelines::internal
