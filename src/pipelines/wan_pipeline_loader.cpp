// WanPipeline::load: model_index.json, each component's config and weights.
#include "omni/error.h"
#include "omni/io/checkpoint.h"
#include "omni/io/json_config.h"
#include "omni/pipelines/wan_pipeline.h"
#include "pipelines/model_directory.h"

namespace fs = std::filesystem;

namespace omni::pipelines {

namespace {

using namespace internal;
using models::wan::AutoencoderKLWan;
using models::wan::AutoencoderKLWanConfig;
using models::wan::UMT5Config;
using models::wan::UMT5EncoderModel;
using models::wan::WanTransformer3DConfig;
using models::wan::WanTransformer3DModel;

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

LoadedComponent<UMT5EncoderModel> load_text_encoder(const fs::path& folder,
                                                    const UMT5Config& config,
                                                    const DtypeSpec& spec) {
  return for_component("text_encoder", [&] {
    const auto checkpoint = io::Checkpoint::open_dir(folder, "model");
    const auto dtype = component_dtype(spec, "text_encoder", checkpoint);
    auto model = construct_in<UMT5EncoderModel>(dtype, config);
    umt5_to_inference_dtype(model, dtype);
    model->load_weights(checkpoint, {.copy = {}, .alias_mapping = true});
    return LoadedComponent<UMT5EncoderModel>{model, dtype};
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
  if (!pipe->config_.boundary_ratio) pipe->defaults_ = WanDefaults::single_expert();
  const auto defaults_path = dir / "omni_defaults.json";
  const bool has_defaults_file = fs::exists(defaults_path);
  if (has_defaults_file) pipe->defaults_ = read_request_defaults(defaults_path, pipe->defaults_);
  OMNI_CHECK(!pipe->config_.expand_timesteps, ConfigError, source,
             ": expand_timesteps = true (Wan2.2 TI2V per-token timesteps) is not supported");
  if (const auto& b = pipe->config_.boundary_ratio)
    OMNI_CHECK(*b > 0.0 && *b < 1.0, ConfigError, source,
               ": boundary_ratio must be in (0, 1), got ", *b);
  expect_class(text_encoder_entry, source, "WanPipeline", {"UMT5EncoderModel"});
  expect_class(tokenizer_entry, source, "WanPipeline",
               {"T5Tokenizer", "T5TokenizerFast", "AutoTokenizer"});
  expect_class(transformer_entry, source, "WanPipeline", {"WanTransformer3DModel"});
  expect_class(transformer_2_entry, source, "WanPipeline", {"WanTransformer3DModel"});
  expect_class(vae_entry, source, "WanPipeline", {"AutoencoderKLWan"});
  require_entry(transformer_entry, source);
  require_entry(vae_entry, source);
  require_entry(scheduler_entry, source);
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

  // Per-component dtypes name components this model has (Note [Dtype from the checkpoint]).
  std::vector<std::string> weighted = {"transformer"};
  if (transformer_2_entry.present()) weighted.push_back("transformer_2");
  if (text_encoder_entry.present()) weighted.push_back("text_encoder");
  weighted.push_back("vae");
  options.dtype.check_components(weighted, source);

  // The scheduler first: cheap, and a bad config fails before any weights load.
  const auto scheduler = read_scheduler_config(scheduler_dir, scheduler_entry, source);
  pipe->scheduler_config_ = scheduler.config;
  pipe->scheduler_source_ = scheduler.source;
  pipe->num_train_timesteps_ = scheduler.num_train_timesteps;

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
    pipe->tokenizer_ = load_tokenizer(tokenizer_dir, e_config->vocab_size, source, "text encoder");
  }

  const auto& dtypes = options.dtype;
  auto transformer = load_wan_transformer(transformer_dir, "transformer", t_config, dtypes);
  pipe->transformer = transformer.model;
  pipe->transformer_dtype_ = transformer.dtype;
  pipe->transformer_2_dtype_ = transformer.dtype;
  if (t2_config) {
    auto transformer_2 =
        load_wan_transformer(transformer_2_dir, "transformer_2", *t2_config, dtypes);
    pipe->transformer_2 = transformer_2.model;
    pipe->transformer_2_dtype_ = transformer_2.dtype;
  }
  auto vae = load_wan_vae(vae_dir, v_config, options);
  pipe->vae = vae.model;
  pipe->vae_dtype_ = vae.dtype;
  if (e_config) {
    auto text_encoder = load_text_encoder(text_encoder_dir, *e_config, dtypes);
    pipe->text_encoder = text_encoder.model;
  }

  if (pipe->has_text_encoder()) pipe->register_module("text_encoder", pipe->text_encoder.ptr());
  pipe->register_module("transformer", pipe->transformer.ptr());
  if (pipe->has_transformer_2()) pipe->register_module("transformer_2", pipe->transformer_2.ptr());
  pipe->register_module("vae", pipe->vae.ptr());
  for (auto& p : pipe->parameters()) p.set_requires_grad(false);

  // A request that sets nothing must be valid (Note [omni_defaults.json]).
  if (has_defaults_file && pipe->has_text_encoder()) check_request_defaults(*pipe, defaults_path);
  return pipe;
}

std::shared_ptr<Pipeline> load_wan_pipeline(const fs::path& dir, const LoadOptions& options) {
  return WanPipeline::load(dir, options);
}

std::vector<std::string> WanPipeline::default_call_schedule(const fs::path& dir) {
  const auto index_path = dir / "model_index.json";
  const auto index = io::read_json_file(index_path);
  const std::string source = index_path.string();
  io::ConfigReader reader(index, source);
  const auto boundary_ratio = reader.nullable<double>("boundary_ratio");
  const auto scheduler_entry = read_entry(reader, index, "scheduler");
  require_entry(scheduler_entry, source);
  auto defaults = boundary_ratio ? WanDefaults{} : WanDefaults::single_expert();
  if (const auto path = dir / "omni_defaults.json"; fs::exists(path))
    defaults = read_request_defaults(path, defaults);
  const auto config =
      read_scheduler_config(component_dir(dir, "scheduler"), scheduler_entry, source);
  auto scheduler = schedulers::make_scheduler(config.config, config.source);
  scheduler->set_timesteps(defaults.steps);
  std::optional<double> boundary;
  if (boundary_ratio) boundary = *boundary_ratio * config.num_train_timesteps;
  return wan_call_schedule(scheduler->timesteps(), boundary, defaults.guidance_scale > 1.0, 1);
}

}  // namespace omni::pipelines
