// WanPipeline::load: model_index.json, each component's config and weights.
#include <algorithm>
#include <set>

#include "omni/error.h"
#include "omni/io/checkpoint.h"
#include "omni/io/json_config.h"
#include "omni/pipelines/wan_pipeline.h"

namespace fs = std::filesystem;

namespace omni::pipelines {

namespace {

using models::wan::AutoencoderKLWan;
using models::wan::AutoencoderKLWanConfig;
using models::wan::UMT5Config;
using models::wan::UMT5EncoderModel;
using models::wan::WanTransformer3DConfig;
using models::wan::WanTransformer3DModel;

// One `"name": [library, class]` entry of model_index.json; absent when the
// key is missing or both are null (diffusers' way of saving None).
struct ComponentEntry {
  std::string name;
  std::optional<std::string> library;
  std::optional<std::string> class_name;
  bool present() const { return class_name.has_value(); }
};

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
                  const std::vector<std::string>& accepted) {
  if (!entry.present()) return;
  const bool ok = std::find(accepted.begin(), accepted.end(), *entry.class_name) != accepted.end();
  std::string list;
  for (const auto& a : accepted) list += (list.empty() ? "" : ", ") + a;
  OMNI_CHECK(ok, ConfigError, source, ": component '", entry.name, "' has class '",
             *entry.class_name, "'; WanPipeline supports ", list);
}

// The folder of a listed component; FormatError naming it when missing.
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

// Runs `load`, prefixing any FormatError/ConfigError with the component's name
// so that the message says which part of the directory is at fault.
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

 private:
  caffe2::TypeMeta saved_;
};

template <typename Model, typename Config>
Model construct_in(torch::ScalarType dtype, const Config& config) {
  DefaultDtypeScope scope(dtype);
  return Model(config);
}

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

template <typename Config>
Config read_config(const fs::path& folder, const std::string& name) {
  return for_component(
      name, [&] { return Config::from_file(component_file(folder, name, {"config.json"})); });
}

WanTransformer3DModel load_transformer(const fs::path& folder, const std::string& name,
                                       const WanTransformer3DConfig& config,
                                       torch::ScalarType dtype) {
  return for_component(name, [&] {
    auto model = construct_in<WanTransformer3DModel>(dtype, config);
    model->to_inference_dtype(dtype);  // before loading: no float32 copy of the weights
    model->load_weights(io::Checkpoint::open_dir(folder, "diffusion_pytorch_model"));
    return model;
  });
}

// transformers keeps UMT5's `wo` projections in float32 when it loads half
// precision (UMT5PreTrainedModel._keep_in_fp32_modules); the port's feed
// forward feeds `wo` its own dtype and its layer norms return to the weights'.
void umt5_to_inference_dtype(UMT5EncoderModel& model, torch::ScalarType dtype) {
  torch::NoGradGuard no_grad;
  model->to(dtype);
  if (dtype != torch::kBFloat16 && dtype != torch::kHalf) return;
  for (const auto& item : model->named_modules()) {
    const auto& path = item.key();
    if (path == "wo" || path.ends_with(".wo")) item.value()->to(torch::kFloat);
  }
}

UMT5EncoderModel load_text_encoder(const fs::path& folder, const UMT5Config& config,
                                   torch::ScalarType dtype) {
  return for_component("text_encoder", [&] {
    auto model = construct_in<UMT5EncoderModel>(dtype, config);
    umt5_to_inference_dtype(model, dtype);
    model->load_weights(io::Checkpoint::open_dir(folder, "model"));
    return model;
  });
}

AutoencoderKLWan load_vae(const fs::path& folder, const AutoencoderKLWanConfig& config) {
  return for_component("vae", [&] {
    AutoencoderKLWan model(config);
    io::load_state_dict(*model, io::Checkpoint::open_dir(folder, "diffusion_pytorch_model"));
    return model;
  });
}

void check_expert_pair(const WanTransformer3DConfig& a, const WanTransformer3DConfig& b,
                       const std::string& source) {
  OMNI_CHECK(a.in_channels == b.in_channels && a.out_channels == b.out_channels &&
                 a.patch_size == b.patch_size && a.text_dim == b.text_dim,
             ConfigError, source,
             ": transformer and transformer_2 must agree on in_channels, out_channels, "
             "patch_size and text_dim (they denoise the same latents with the same prompt)");
}

// Note [omni_defaults.json]
// A diffusers directory says nothing about the size a model was trained for,
// and WanPipeline.__call__'s defaults (832×480, 81 frames) suit only the real
// Wan2.2. An optional omni_defaults.json next to model_index.json sets this
// model's request defaults: any of steps, guidance_scale, guidance_scale_2,
// width, height, num_frames, fps. diffusers ignores the file. Unknown fields
// and values a request could not use are ConfigErrors naming the file.
WanDefaults read_request_defaults(const fs::path& path, WanDefaults d) {
  const auto json = io::read_json_file(path);
  OMNI_CHECK(json.is_object(), ConfigError, path.string(), ": expected a JSON object");
  io::ConfigReader reader(json, path.string());
  d.steps = reader.optional<int>("steps", d.steps);
  d.guidance_scale = reader.optional<double>("guidance_scale", d.guidance_scale);
  d.guidance_scale_2 = reader.optional<double>("guidance_scale_2", d.guidance_scale_2);
  d.width = reader.optional<int>("width", d.width);
  d.height = reader.optional<int>("height", d.height);
  d.num_frames = reader.optional<int>("num_frames", d.num_frames);
  d.fps = reader.optional<int>("fps", d.fps);
  reader.finish();
  return d;
}

}  // namespace

std::shared_ptr<WanPipeline> WanPipeline::load(const fs::path& dir, const LoadOptions& options) {
  const auto index_path = dir / "model_index.json";
  const auto index = io::read_json_file(index_path);
  const std::string source = index_path.string();
  io::ConfigReader reader(index, source);
  std::shared_ptr<WanPipeline> pipe(new WanPipeline());
  pipe->config_.boundary_ratio = reader.nullable<double>("boundary_ratio");
  pipe->config_.expand_timesteps = reader.optional<bool>("expand_timesteps", false);
  const auto text_encoder_entry = read_entry(reader, index, "text_encoder");
  const auto tokenizer_entry = read_entry(reader, index, "tokenizer");
  const auto transformer_entry = read_entry(reader, index, "transformer");
  const auto transformer_2_entry = read_entry(reader, index, "transformer_2");
  const auto vae_entry = read_entry(reader, index, "vae");
  const auto scheduler_entry = read_entry(reader, index, "scheduler");
  reader.finish();

  // Plan: every structural check before any weight is read.
  if (!pipe->config_.boundary_ratio) {
    pipe->defaults_.steps = 50;
    pipe->defaults_.guidance_scale = 5.0;
    pipe->defaults_.guidance_scale_2 = 5.0;
  }
  const auto defaults_path = dir / "omni_defaults.json";
  const bool has_defaults_file = fs::exists(defaults_path);
  if (has_defaults_file) pipe->defaults_ = read_request_defaults(defaults_path, pipe->defaults_);
  OMNI_CHECK(!pipe->config_.expand_timesteps, ConfigError, source,
             ": expand_timesteps = true (Wan2.2 TI2V per-token timesteps) is not supported");
  if (const auto& b = pipe->config_.boundary_ratio)
    OMNI_CHECK(*b > 0.0 && *b < 1.0, ConfigError, source,
               ": boundary_ratio must be in (0, 1), got ", *b);
  expect_class(text_encoder_entry, source, {"UMT5EncoderModel"});
  expect_class(tokenizer_entry, source, {"T5Tokenizer", "T5TokenizerFast", "AutoTokenizer"});
  expect_class(transformer_entry, source, {"WanTransformer3DModel"});
  expect_class(transformer_2_entry, source, {"WanTransformer3DModel"});
  expect_class(vae_entry, source, {"AutoencoderKLWan"});
  OMNI_CHECK(transformer_entry.present(), ConfigError, source,
             ": component 'transformer' is required (it is null or absent)");
  OMNI_CHECK(vae_entry.present(), ConfigError, source,
             ": component 'vae' is required (it is null or absent)");
  OMNI_CHECK(scheduler_entry.present(), ConfigError, source,
             ": component 'scheduler' is required (it is null or absent)");
  OMNI_CHECK(text_encoder_entry.present() == tokenizer_entry.present(), ConfigError, source,
             ": text_encoder and tokenizer come together (one is null, the other is not)");
  OMNI_CHECK(!transformer_2_entry.present() || pipe->config_.boundary_ratio, ConfigError, source,
             ": transformer_2 is listed but boundary_ratio is null, so it would never run");
  OMNI_CHECK(transformer_2_entry.present() || !pipe->config_.boundary_ratio, ConfigError, source,
             ": boundary_ratio = ", pipe->config_.boundary_ratio.value_or(0),
             " needs transformer_2 for the low-noise steps, but it is null or absent");

  const auto transformer_dir = component_dir(dir, "transformer");
  const auto vae_dir = component_dir(dir, "vae");
  const auto scheduler_dir = component_dir(dir, "scheduler");
  const auto transformer_2_dir =
      transformer_2_entry.present() ? component_dir(dir, "transformer_2") : fs::path();
  const auto text_encoder_dir =
      text_encoder_entry.present() ? component_dir(dir, "text_encoder") : fs::path();
  const auto tokenizer_dir =
      tokenizer_entry.present() ? component_dir(dir, "tokenizer") : fs::path();

  // The scheduler first: cheap, and a bad config fails before any weights load.
  const auto scheduler_path =
      component_file(scheduler_dir, "scheduler", {"scheduler_config.json", "config.json"});
  pipe->scheduler_config_ = io::read_json_file(scheduler_path);
  pipe->scheduler_source_ = scheduler_path.string();
  const auto probe = pipe->make_scheduler();
  OMNI_CHECK(probe->class_name() == *scheduler_entry.class_name, ConfigError, source,
             ": model_index.json names scheduler class '", *scheduler_entry.class_name, "' but ",
             scheduler_path.string(), " is a ", probe->class_name());
  pipe->num_train_timesteps_ = probe->num_train_timesteps();

  // Every config, and how they fit together, before any weight is read.
  const auto t_config = read_config<WanTransformer3DConfig>(transformer_dir, "transformer");
  std::optional<WanTransformer3DConfig> t2_config;
  if (transformer_2_entry.present()) {
    t2_config = read_config<WanTransformer3DConfig>(transformer_2_dir, "transformer_2");
    check_expert_pair(t_config, *t2_config, source);
  }
  const auto v_config = read_config<AutoencoderKLWanConfig>(vae_dir, "vae");
  OMNI_CHECK(t_config.in_channels == v_config.z_dim && t_config.out_channels == v_config.z_dim,
             ConfigError, source, ": transformer in/out_channels (", t_config.in_channels, "/",
             t_config.out_channels, ") must equal the VAE's z_dim (", v_config.z_dim, ")");
  std::optional<UMT5Config> e_config;
  if (text_encoder_entry.present()) {
    e_config = read_config<UMT5Config>(text_encoder_dir, "text_encoder");
    OMNI_CHECK(e_config->d_model == t_config.text_dim, ConfigError, source,
               ": text_encoder d_model (", e_config->d_model,
               ") must equal the transformer's text_dim (", t_config.text_dim, ")");
    pipe->tokenizer_ = for_component("tokenizer", [&] {
      return io::Tokenizer::from_file(component_file(tokenizer_dir, "tokenizer", {"spiece.model"}));
    });
    OMNI_CHECK(pipe->tokenizer_->vocab_size() <= e_config->vocab_size, ConfigError, source,
               ": the tokenizer has ", pipe->tokenizer_->vocab_size(),
               " pieces but the text encoder embeds only ", e_config->vocab_size);
  }

  const auto dtype = options.dtype;
  pipe->transformer_dtype_ = dtype;
  pipe->vae_dtype_ = torch::kFloat32;
  pipe->transformer = load_transformer(transformer_dir, "transformer", t_config, dtype);
  if (t2_config)
    pipe->transformer_2 = load_transformer(transformer_2_dir, "transformer_2", *t2_config, dtype);
  pipe->vae = load_vae(vae_dir, v_config);
  if (e_config) pipe->text_encoder = load_text_encoder(text_encoder_dir, *e_config, dtype);

  if (pipe->has_text_encoder()) pipe->register_module("text_encoder", pipe->text_encoder.ptr());
  pipe->register_module("transformer", pipe->transformer.ptr());
  if (pipe->has_transformer_2()) pipe->register_module("transformer_2", pipe->transformer_2.ptr());
  pipe->register_module("vae", pipe->vae.ptr());
  for (auto& p : pipe->parameters()) p.set_requires_grad(false);

  // A request that sets nothing must be valid (Note [omni_defaults.json]).
  if (has_defaults_file && pipe->has_text_encoder()) {
    try {
      GenerationRequest probe;
      probe.prompt = "omni_defaults.json";
      pipe->resolve(probe);
    } catch (const InvalidRequest& e) {
      throw ConfigError(detail::concat(defaults_path.string(), ": ", e.what()));
    }
  }
  return pipe;
}

std::shared_ptr<Pipeline> load_wan_pipeline(const fs::path& dir, const LoadOptions& options) {
  return WanPipeline::load(dir, options);
}

}  // namespace omni::pipelines
