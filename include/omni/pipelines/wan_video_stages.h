// The stages every text-to-video pipeline over Wan latents shares
// (WanPipeline, OmniUnifiedPipeline): request defaults and validation, the
// initial noise, the guided flow-matching loop, un-normalising the latents
// and turning the decoded video into frames. Each pipeline supplies its own
// prompt encoder and its own denoiser call; the rest is these functions, so
// both pipelines compute the same numbers the same way.
//
//   auto r = resolve_video_request(request, defaults, dit_config, vae_config, false);
//   auto latents = prepare_video_latents(dit_config, vae_config, 1, *r.height, *r.width,
//                                        *r.num_frames, r.seed, device);
//   auto result = run_denoise_loop(*scheduler, latents, *r.steps,
//                                  [&](DenoiseStep& s, double t) { ...the predictions... });
//   auto frames = to_uint8_frames(postprocess_video(vae->decode(
//       unnormalize_video_latents(vae_config, result.latents, torch::kFloat32))));
//
// Every function is synchronous on the caller's thread and keeps no state.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "omni/io/tokenizer.h"
#include "omni/models/wan/autoencoder_kl_wan.h"
#include "omni/models/wan/wan_transformer_config.h"
#include "omni/pipelines/pipeline.h"
#include "omni/schedulers/scheduler.h"

namespace omni::pipelines {

// What one denoising step saw and produced; tensors are on the compute device.
struct DenoiseStep {
  int index = 0;  // 0-based
  int total = 0;
  int expert = 0;  // 0 = transformer (or the only denoiser), 1 = transformer_2
  double guidance_scale = 1.0;
  torch::Tensor timestep;    // [B], the schedule's dtype (int64 for UniPC), as the expert got it
  torch::Tensor latents_in;  // the scheduler's sample before the step
  torch::Tensor noise_pred_cond;    // expert output with prompt_embeds
  torch::Tensor noise_pred_uncond;  // with negative_prompt_embeds; undefined without CFG
  torch::Tensor noise_pred;         // the guided prediction given to scheduler.step
  torch::Tensor latents_out;        // scheduler.step's result
};
// Called after every step, on the caller's thread; must not keep the tensors
// beyond the call unless it copies them (they are the loop's own).
using StepObserver = std::function<void(const DenoiseStep&)>;

struct DenoiseArgs {
  int steps = 40;
  double guidance_scale = 4.0;
  // Used for transformer_2's steps; null means guidance_scale (as diffusers).
  std::optional<double> guidance_scale_2;
  // The request's overrides of the model's expert switch and scheduler shift
  // (GenerationRequest); null: the model's own.
  std::optional<double> boundary_ratio;
  std::optional<double> flow_shift;
  // The schedule step to start from, 0..steps−1: the latents are then already
  // noised to that step's sigma (a drawn clip denoised part of the way, as
  // omni-quality --from-sigma does). 0 is a whole generation.
  int first_step = 0;
};

struct DenoiseResult {
  torch::Tensor latents;    // final latents, on the compute device
  torch::Tensor timesteps;  // the schedule that ran (CPU)
  torch::Tensor sigmas;     // its noise levels (CPU, steps + 1)
};

// Request defaults (diffusers' where it has them): a two-expert model
// (boundary_ratio set) uses the Wan2.2 A14B recipe — 40 steps, guidance 4.0 for
// the high-noise and 3.0 for the low-noise expert; a single-expert model uses
// WanPipeline.__call__'s 50 steps and 5.0. Both: 832×480, 81 frames, 16 fps.
// A request that sets guidance_scale but not guidance_scale_2 uses
// guidance_scale for both experts, as diffusers does. A model directory may
// override any of them in omni_defaults.json (Note [omni_defaults.json] in
// model_directory.cpp).
struct WanDefaults {
  int steps = 40;
  double guidance_scale = 4.0;
  double guidance_scale_2 = 3.0;
  int width = 832;
  int height = 480;
  int num_frames = 81;
  int fps = 16;

  // WanPipeline.__call__'s defaults for a single denoiser: 50 steps, 5.0.
  static WanDefaults single_expert();
};

// Fills the unset fields from `defaults` and validates: InvalidRequest naming
// the field for an empty prompt, steps outside 1..1000, a width/height that is
// not a positive multiple of vae × patch, num_frames ≠ 4k+1, sizes beyond the
// denoiser's RoPE table, non-finite guidance or fps outside 1..240. With
// `two_experts`, guidance_scale_2 is filled too (the default pair when the
// request sets no guidance, else guidance_scale); without, the caller has
// rejected a guidance_scale_2 already.
GenerationRequest resolve_video_request(const GenerationRequest& request,
                                        const WanDefaults& defaults,
                                        const models::wan::WanTransformer3DConfig& denoiser,
                                        const models::wan::AutoencoderKLWanConfig& vae,
                                        bool two_experts);

// The components a run calls, in order (Pipeline::call_schedule): the text
// encoder once per prompt (two with CFG) for each of `batch` requests, then
// per timestep the expert that runs it — "transformer" while t ≥
// `boundary_timestep` (or always without one), else "transformer_2" — once
// per prediction (two with CFG), then the VAE once per request.
std::vector<std::string> wan_call_schedule(const torch::Tensor& timesteps,
                                           std::optional<double> boundary_timestep, bool cfg,
                                           std::size_t batch);

// Note [Phase-batched runs] (pipeline.h): what must match for resolved
// requests to denoise together: width, height, num_frames, steps,
// guidance_scale and guidance_scale_2 (exactly; the steps fix which expert
// runs when). Prompts, seeds and fps may differ.
std::string video_batch_key(const GenerationRequest& resolved);

// diffusers' prompt_clean without ftfy: html.unescape twice, then runs of
// (ASCII) whitespace become one space and the ends are stripped.
std::string clean_prompt(const std::string& text);

// Each prompt through clean_prompt, then tokenized to `max_length` tokens
// (io::Tokenizer's T5 conventions: pieces, EOS, padding).
io::TokenizedBatch tokenize_prompts(const io::Tokenizer& tokenizer,
                                    const std::vector<std::string>& prompts,
                                    std::int64_t max_length);

// Standard-normal float32 latents [B, in_channels, (F−1)/4+1, H/8, W/8] (the
// VAE's compressions) from a CPU generator seeded with `seed`, moved to `device`.
torch::Tensor prepare_video_latents(const models::wan::WanTransformer3DConfig& denoiser,
                                    const models::wan::AutoencoderKLWanConfig& vae,
                                    std::int64_t batch, int height, int width, int num_frames,
                                    std::uint64_t seed, torch::Device device);

// InvalidRequest unless latents are [B, in_channels, F, H, W], prompt_embeds
// [B, L, text_dim], negative_prompt_embeds too when guidance_scale > 1, and
// steps ≥ 1.
void check_denoise_inputs(const models::wan::WanTransformer3DConfig& denoiser,
                          const torch::Tensor& prompt_embeds,
                          const torch::Tensor& negative_prompt_embeds, const torch::Tensor& latents,
                          const DenoiseArgs& args);

// Fills one step's expert, guidance_scale, noise_pred_cond and (with CFG)
// noise_pred_uncond from step.timestep and step.latents_in; `t` is the
// schedule's timestep as a number.
using StepPredictor = std::function<void(DenoiseStep& step, double t)>;

// The loop of Note [WanPipeline loop] with the denoiser call left to
// `predict`: set_timesteps(steps), set_begin_index(first_step), then for each
// timestep t from first_step on: timestep = t expanded to the batch on the latents' device,
// predict, noise_pred = uncond + g·(cond − uncond) when an unconditional
// prediction was made (else cond), latents = scheduler.step(noise_pred, t,
// latents), observer, progress.
// DenoiseStep::index counts from first_step, total is `steps`. InvalidRequest
// unless 0 ≤ first_step < steps.
DenoiseResult run_denoise_loop(schedulers::Scheduler& scheduler, torch::Tensor latents, int steps,
                               const StepPredictor& predict, const StepObserver& observer = {},
                               const ProgressFn& progress = {}, int first_step = 0);

// The inverse of unnormalize_video_latents: (latents − latents_mean) ·
// (1/latents_std) per channel, in float32 (what diffusers does to a VAE's
// encoding before noising it).
torch::Tensor normalize_video_latents(const models::wan::AutoencoderKLWanConfig& vae,
                                      const torch::Tensor& latents);

// latents / (1/latents_std) + latents_mean per channel, in `vae_dtype`
// (diffusers' un-normalisation, operation for operation).
torch::Tensor unnormalize_video_latents(const models::wan::AutoencoderKLWanConfig& vae,
                                        const torch::Tensor& latents, torch::ScalarType vae_dtype);

// [B, 3, F, H, W] in [-1, 1] → float32 [B, F, 3, H, W] in [0, 1]
// (diffusers' postprocess_video with output_type "pt").
torch::Tensor postprocess_video(const torch::Tensor& decoded);
// float [B, F, 3, H, W] in [0, 1] → uint8 [B, F, H, W, 3] (×255, rounded), on the host.
torch::Tensor to_uint8_frames(const torch::Tensor& video);

}  // namespace omni::pipelines
