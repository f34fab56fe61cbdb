// WanPipeline: diffusers' Wan2.x text-to-video pipeline (pipelines/wan/
// pipeline_wan.py) over a diffusers model directory:
//
//   model_index.json            _class_name "WanPipeline", boundary_ratio, expand_timesteps
//   text_encoder/               transformers UMT5EncoderModel: config.json, model*.safetensors
//   tokenizer/spiece.model      SentencePiece (T5 conventions, see io/tokenizer.h)
//   transformer/                WanTransformer3DModel (the high-noise expert with a boundary)
//   transformer_2/              optional low-noise expert (Wan2.2 A14B); absent in Wan2.1
//   vae/                        AutoencoderKLWan
//   scheduler/scheduler_config.json (or config.json)
//
// A directory without text_encoder and tokenizer (both null in model_index)
// loads too; it can only run from prompt embeddings (denoise()), and a text
// request is a ConfigError.
//
// The run follows diffusers step by step (Note [WanPipeline loop]):
//
//   auto pipe = WanPipeline::load(dir, {.dtype = torch::kBFloat16});
//   auto out = pipe->run(pipe->resolve({.prompt = "a cat", .seed = 7}), {});
//
// or, from embeddings:
//
//   auto result = pipe->denoise(prompt_embeds, negative_embeds, latents,
//                               {.steps = 6, .guidance_scale = 4.0, .guidance_scale_2 = 3.0},
//                               [](const DenoiseStep& s) { ... });
//   auto video = WanPipeline::postprocess_video(pipe->decode(result.latents));
//
// Threading: one run at a time per pipeline (the engine's worker thread);
// every call is synchronous on the caller's thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "omni/io/tokenizer.h"
#include "omni/models/wan/autoencoder_kl_wan.h"
#include "omni/models/wan/umt5_encoder.h"
#include "omni/models/wan/wan_transformer.h"
#include "omni/pipelines/pipeline.h"
#include "omni/pipelines/wan_video_stages.h"
#include "omni/schedulers/scheduler.h"

namespace omni::pipelines {

// Note [WanPipeline loop]
// For each timestep t of the scheduler (set_timesteps(steps), then
// set_begin_index(0)):
//   expert  = transformer when boundary_ratio is null or t ≥ boundary_ratio ×
//             num_train_timesteps, else transformer_2; its guidance scale is
//             guidance_scale, resp. guidance_scale_2;
//   cond    = expert(latents, t.expand(B), prompt_embeds);
//   uncond  = expert(latents, t.expand(B), negative_prompt_embeds);  two calls of batch B
//   pred    = uncond + g·(cond − uncond);
//   latents = scheduler.step(pred, t, latents).
// Classifier-free guidance runs only when guidance_scale > 1 (diffusers tests
// guidance_scale alone, not guidance_scale_2); without it, pred = cond and no
// negative embeddings are needed. Latents start in float32 and keep the dtype
// scheduler.step() returns (float32 with UniPC). One scheduler serves the
// whole loop: its multistep history carries across the expert switch.

// model_index.json's own fields.
struct WanPipelineConfig {
  // Expert switch: transformer while t ≥ boundary_ratio × num_train_timesteps.
  // Null: transformer alone (Wan2.1).
  std::optional<double> boundary_ratio;
  // Wan2.2 TI2V per-token timesteps: not implemented (true is a ConfigError).
  bool expand_timesteps = false;
};

// DenoiseStep, StepObserver, DenoiseArgs, DenoiseResult and WanDefaults are
// shared with the other pipelines over Wan latents (wan_video_stages.h).

class WanPipeline final : public Pipeline {
 public:
  // Loads a diffusers directory (see the file comment). Strict: an unknown
  // model_index field, an unsupported component class, components that do not
  // fit together (channels, text width) or expand_timesteps = true are
  // ConfigErrors; a missing component folder, config or weights file, a
  // truncated file, a missing / unexpected / mis-shaped tensor are
  // FormatErrors naming the component and the file or tensor. Each component
  // is loaded in options.dtype's choice for it, by default its stored dtype
  // (Note [Dtype from the checkpoint]; the DiTs keep what diffusers keeps in
  // float32); a dtype override naming a component the directory lacks is a
  // ConfigError before any weight is read.
  static std::shared_ptr<WanPipeline> load(const std::filesystem::path& dir,
                                           const LoadOptions& options = {});

  // The components a default request calls (call_schedule), read from
  // `dir`'s model_index.json, scheduler config and omni_defaults.json alone,
  // before any weight loads (omni inspect's device plan). The errors of
  // load() for those files.
  static std::vector<std::string> default_call_schedule(const std::filesystem::path& dir);

  std::string class_name() const override { return "WanPipeline"; }
  // DiTs: transformer (and transformer_2 when present); encoder: text_encoder
  // when present; VAE: vae.
  offload::ComponentSpec components() const override;
  // Fills the defaults (WanDefaults) and validates (resolve_video_request):
  // InvalidRequest naming the field for an empty prompt, steps outside
  // 1..1000, a width/height that is not a positive multiple of vae×patch
  // (16), num_frames ≠ 4k+1, sizes beyond the transformer's RoPE table,
  // guidance_scale_2 on a single-expert model, non-finite guidance or fps
  // outside 1..240. ConfigError when the model has no text encoder.
  GenerationRequest resolve(const GenerationRequest& request) const override;
  // Encodes the prompts, draws the initial noise from request.seed on a CPU
  // generator, denoises, decodes. frames: uint8 [F, H, W, 3].
  GenerationOutput run(const GenerationRequest& request, const RunContext& context) override;
  // text_encoder once per prompt, the step's expert once per forward
  // (twice a step with guidance), vae once.
  std::vector<std::string> call_schedule(const GenerationRequest& request) const override;
  // Note [Phase-batched runs]: the key is video_batch_key(); run() is
  // run_batch() of one request.
  std::optional<std::string> batch_key(const GenerationRequest& request) const override;
  std::vector<GenerationOutput> run_batch(const std::vector<GenerationRequest>& requests,
                                          const RunContext& context) override;
  std::vector<std::string> batch_call_schedule(
      const std::vector<GenerationRequest>& requests) const override;
  bool prompts_cached(const GenerationRequest& request, PromptCache& cache) const override;

  // --- Building blocks of run(), usable on their own -----------------------

  // T5 prompt embeddings [B, max_sequence_length, text_dim] in the
  // transformers' dtype on `device`: whitespace-cleaned prompts, tokenized,
  // encoded with the attention mask, and zeroed past each prompt's real
  // length (diffusers' _get_t5_prompt_embeds). Calls the encoder through its
  // holder. ConfigError when the model has no text encoder.
  // With a `cache`, the output is taken from it when it holds these tokens
  // (the encoder then neither runs nor uploads; Note [Prompt cache]).
  torch::Tensor encode_prompt(const std::vector<std::string>& prompts, torch::Device device,
                              PromptCache* cache = nullptr);

  // Standard-normal float32 latents [B, z_dim, (F−1)/4+1, H/8, W/8] from a CPU
  // generator seeded with `seed`, moved to `device`.
  torch::Tensor prepare_latents(std::int64_t batch, int height, int width, int num_frames,
                                std::uint64_t seed, torch::Device device) const;

  // Note [WanPipeline loop] from `latents` (B items; embeddings [B, L, text_dim]).
  // InvalidRequest on shapes that do not fit or a missing negative_prompt_embeds
  // when CFG is on.
  DenoiseResult denoise(const torch::Tensor& prompt_embeds,
                        const torch::Tensor& negative_prompt_embeds, torch::Tensor latents,
                        const DenoiseArgs& args, const StepObserver& observer = {},
                        const ProgressFn& progress = {});

  // latents / (1/latents_std) + latents_mean per channel, in the VAE's dtype
  // (diffusers' un-normalisation, operation for operation).
  torch::Tensor unnormalize_latents(const torch::Tensor& latents) const;
  // vae.decode (runs the VAE's hooks): [B, 3, F, H, W] in [-1, 1].
  torch::Tensor decode(const torch::Tensor& z);
  // [B, 3, F, H, W] in [-1, 1] → float32 [B, F, 3, H, W] in [0, 1]
  // (diffusers' postprocess_video with output_type "pt").
  static torch::Tensor postprocess_video(const torch::Tensor& decoded) {
    return pipelines::postprocess_video(decoded);
  }
  // float [B, F, 3, H, W] in [0, 1] → uint8 [B, F, H, W, 3] (×255, rounded).
  static torch::Tensor to_uint8_frames(const torch::Tensor& video) {
    return pipelines::to_uint8_frames(video);
  }

  // A fresh scheduler from the directory's scheduler config; `flow_shift`
  // replaces its shift (a request's override).
  std::unique_ptr<schedulers::Scheduler> make_scheduler(
      std::optional<double> flow_shift = std::nullopt) const;
  // boundary_ratio × num_train_timesteps, or null for a single expert;
  // `boundary_ratio` replaces the model's (a request's override).
  std::optional<double> boundary_timestep(
      std::optional<double> boundary_ratio = std::nullopt) const;

  const WanPipelineConfig& config() const { return config_; }
  const WanDefaults& defaults() const { return defaults_; }
  bool has_text_encoder() const { return !text_encoder.is_empty(); }
  bool has_transformer_2() const { return !transformer_2.is_empty(); }
  // The dtypes the experts compute in (chosen at load); the prompt
  // embeddings are cast to each expert's.
  torch::ScalarType transformer_dtype() const { return transformer_dtype_; }
  torch::ScalarType transformer_2_dtype() const { return transformer_2_dtype_; }
  torch::ScalarType vae_dtype() const { return vae_dtype_; }

  // Tokens per prompt (default 512, as diffusers). A smaller value makes
  // encoding cheaper for tiny models; InvalidRequest when < 1.
  std::int64_t max_sequence_length() const { return max_sequence_length_; }
  void set_max_sequence_length(std::int64_t length);

  // Components (holders: calling them runs the offload hooks). Empty holders
  // for absent components.
  models::wan::UMT5EncoderModel text_encoder{nullptr};
  models::wan::WanTransformer3DModel transformer{nullptr};
  models::wan::WanTransformer3DModel transformer_2{nullptr};
  models::wan::AutoencoderKLWan vae{nullptr};

 private:
  WanPipeline() = default;
  // The prompt cache's name for this encoder (Note [Prompt cache]).
  std::string prompt_cache_encoder() const;

  WanPipelineConfig config_;
  WanDefaults defaults_;
  std::optional<io::Tokenizer> tokenizer_;
  nlohmann::json scheduler_config_;
  std::string scheduler_source_;
  int num_train_timesteps_ = 1000;
  torch::ScalarType transformer_dtype_ = torch::kFloat32;
  torch::ScalarType transformer_2_dtype_ = torch::kFloat32;
  torch::ScalarType vae_dtype_ = torch::kFloat32;
  std::int64_t max_sequence_length_ = 512;
};

// The registry's factory for model_index.json `_class_name` "WanPipeline".
std::shared_ptr<Pipeline> load_wan_pipeline(const std::filesystem::path& dir,
                                            const LoadOptions& options);

}  // namespace omni::pipelines
