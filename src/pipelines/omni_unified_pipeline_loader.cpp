// OmniUnifiedPipeline::load: model_index.json, each component's config and
// weights (the directory layout is in omni_unified_pipeline.h).
#include "omni/error.h"
#include "omni/io/checkpoint.h"
#include "omni/io/json_config.h"
#include "omni/pipelines/omni_unified_pipeline.h"
#include "pipelines/model_directory.h"

namespace fs = std::filesystem;

namespace omni::pipelines {

namespace {

using namespace internal;
using models::unified::OmniUnifiedTransformer;
using models::unified::OmniUnifiedTransformerConfig;

constexpr const char* kPipeline = "OmniUnifiedPipeline";

LoadedComponent<OmniUnifiedTransformer> load_unified_transformer(
    const fs::path& folder, const OmniUnifiedTransformerConfig& config, const DtypeSpec& spec) {
  return for_component("transformer", [&] {
    const auto checkpoint = io::Checkpoint::open_dir(folder, "diffusion_pytorch_model");
    const auto dtype = component_dtype(spec, "transformer", checkpoint);
    auto model = construct_in<OmniUnifiedTransformer>(dtype, config);
    model->to_inference_dtype(dtype);  // before loading: no float32 copy of the weights
    model->load_weights(checkpoint, {.copy = {}, .alias_mapping = true});
    return LoadedComponent<OmniUnifiedTransformer>{model, dtype};
  });
}

}  // namespace

std::shared_ptr<OmniUnifiedPipeline> OmniUnifiedPipeline::load(const fs::path& dir,
                                                               const LoadOptions& options) {
  const auto index_path = dir / "model_index.json";
  const auto index = io::read_json_file(index_path);
  const std::string source = index_path.string();
  OMNI_CHECK(index.is_object(), ConfigError, source, ": expected a JSON object");
  io::ConfigReader reader(index, source);
  const auto tokenizer_entry = read_entry(reader, index, "tokenizer");
  const auto transformer_entry = read_entry(reader, index, "transformer");
  const auto vae_entry = read_entry(reader, index, "vae");
  const auto scheduler_entry = read_entry(reader, index, "scheduler");
  reader.finish();

  // Plan: every structural check before any weight is read.
  std::shared_ptr<OmniUnifiedPipeline> pipe(new OmniUnifiedPipeline());
  const auto defaults_path = dir / "omni_defaults.json";
  const bool has_defaults_file = fs::exists(defaults_path);
  if (has_defaults_file)
    pipe->defaults_ =
        read_request_defaults(defaults_path, pipe->defaults_, /*single_denoiser=*/true);
  expect_class(tokenizer_entry, source, kPipeline,
               {"T5Tokenizer", "T5TokenizerFast", "AutoTokenizer"});
  expect_class(transformer_entry, source, kPipeline, {"OmniUnifiedTransformer"});
  expect_class(vae_entry, source, kPipeline, {"AutoencoderKLWan"});
  for (const auto* entry : {&tokenizer_entry, &transformer_entry, &vae_entry, &scheduler_entry})
    require_entry(*entry, source);
  const auto tokenizer_dir = component_dir(dir, "tokenizer");
  const auto transformer_dir = component_dir(dir, "transformer");
  const auto vae_dir = component_dir(dir, "vae");
  const auto scheduler_dir = component_dir(dir, "scheduler");

  // Per-component dtypes name components this model has (Note [Dtype from the checkpoint]).
  options.dtype.check_components({"transformer", "vae"}, source);

  // The scheduler first: cheap, and a bad config fails before any weights load.
  const auto scheduler = read_scheduler_config(scheduler_dir, scheduler_entry, source);
  pipe->scheduler_config_ = scheduler.config;
  pipe->scheduler_source_ = scheduler.source;

  // Every config, and how they fit together, before any weight is read.
  const auto t_config = read_config<OmniUnifiedTransformerConfig>(transformer_dir, "transformer");
  const auto v_config = read_config<models::wan::AutoencoderKLWanConfig>(vae_dir, "vae");
  const auto& g = t_config.generator;
  OMNI_CHECK(g.in_channels == v_config.z_dim && g.out_channels == v_config.z_dim, ConfigError,
             source, ": the generator's in/out_channels (", g.in_channels, "/", g.out_channels,
             ") must equal the VAE's z_dim (", v_config.z_dim, ")");
  pipe->tokenizer_ = load_tokenizer(tokenizer_dir, t_config.vocab_size, source, "reasoner");

  auto transformer = load_unified_transformer(transformer_dir, t_config, options.dtype);
  pipe->transformer = transformer.model;
  pipe->transformer_dtype_ = transformer.dtype;
  auto vae = load_wan_vae(vae_dir, v_config, options);
  pipe->vae = vae.model;
  pipe->vae_dtype_ = vae.dtype;
  pipe->register_module("transformer", pipe->transformer.ptr());
  pipe->register_module("vae", pipe->vae.ptr());
  for (auto& p : pipe->parameters()) p.set_requires_grad(false);

  // A request that sets nothing must be valid (Note [omni_defaults.json]).
  if (has_defaults_file) check_request_defaults(*pipe, defaults_path);
  return pipe;
}

std::shared_ptr<Pipeline> load_omni_unified_pipeline(const fs::path& dir,
                                                     const LoadOptions& options) {
  return OmniUnifiedPipeline::load(dir, options);
}

}  // namespace omni::pipelines
