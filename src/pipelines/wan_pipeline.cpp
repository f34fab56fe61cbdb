// WanPipeline: request defaults and validation, prompt encoding, the
// denoising loop (Note [WanPipeline loop]), decoding.
#include "omni/pipelines/wan_pipeline.h"

#include "omni/error.h"
#include "omni/pipelines/prompt_cache.h"

namespace omni::pipelines {

offload::ComponentSpec WanPipeline::components() const {
  offload::ComponentSpec spec;
  spec.dit_modules.push_back("transformer");
  if (has_transformer_2()) spec.dit_modules.push_back("transformer_2");
  if (has_text_encoder()) spec.encoder_modules.push_back("text_encoder");
  spec.vae_modules.push_back("vae");
  return spec;
}

void WanPipeline::set_max_sequence_length(std::int64_t length) {
  OMNI_CHECK(length >= 1, InvalidRequest, "max_sequence_length must be at least 1, got ", length);
  max_sequence_length_ = length;
}

std::unique_ptr<schedulers::Scheduler> WanPipeline::make_scheduler(
    std::optional<double> flow_shift) const {
  return schedulers::make_scheduler(scheduler_config_, scheduler_source_, {.shift = flow_shift});
}

std::optional<double> WanPipeline::boundary_timestep(std::optional<double> boundary_ratio) const {
  if (!config_.boundary_ratio) return std::nullopt;
  return boundary_ratio.value_or(*config_.boundary_ratio) * num_train_timesteps_;
}

GenerationRequest WanPipeline::resolve(const GenerationRequest& in) const {
  OMNI_CHECK(has_text_encoder(), ConfigError,
             "this WanPipeline has no text_encoder/tokenizer (null in model_index.json): it runs "
             "from prompt embeddings only (WanPipeline::denoise), not from a text prompt");
  const bool two_experts = config_.boundary_ratio.has_value();
  OMNI_CHECK(two_experts || !in.guidance_scale_2, InvalidRequest,
             "guidance_scale_2 needs a two-expert model (boundary_ratio set); this one has a "
             "single transformer");
  OMNI_CHECK(two_experts || !in.boundary_ratio, InvalidRequest,
             "boundary_ratio needs a two-expert model (boundary_ratio set in model_index.json); "
             "this one has a single transformer");
  return resolve_video_request(in, defaults_, transformer->config(), vae->config(), two_experts);
}

std::vector<std::string> WanPipeline::call_schedule(const GenerationRequest& r) const {
  return batch_call_schedule({r});
}

std::vector<std::string> WanPipeline::batch_call_schedule(
    const std::vector<GenerationRequest>& requests) const {
  OMNI_INTERNAL_ASSERT(!requests.empty(), "the call schedule of an empty batch");
  const auto& r = requests.front();
  auto scheduler = make_scheduler(r.flow_shift);
  scheduler->set_timesteps(r.steps.value_or(1));
  return wan_call_schedule(scheduler->timesteps(), boundary_timestep(r.boundary_ratio),
                           r.guidance_scale.value_or(1.0) > 1.0, requests.size());
}

std::optional<std::string> WanPipeline::batch_key(const GenerationRequest& request) const {
  return video_batch_key(request);
}

std::string WanPipeline::prompt_cache_encoder() const {
  // What changes the output for the same tokens: this encoder, and the dtype it is cast to.
  return detail::concat("WanPipeline@", text_encoder.get(), ",", c10::toString(transformer_dtype_));
}

bool WanPipeline::prompts_cached(const GenerationRequest& r, PromptCache& cache) const {
  if (!has_text_encoder() || !tokenizer_) return false;
  const auto cached = [&](const std::string& prompt) {
    const auto tokens = tokenize_prompts(*tokenizer_, {prompt}, max_sequence_length_);
    return cache.contains(
        PromptCache::key(prompt_cache_encoder(), {tokens.input_ids, tokens.attention_mask}));
  };
  return cached(r.prompt) && (r.guidance_scale.value_or(1.0) <= 1.0 || cached(r.negative_prompt));
}

torch::Tensor WanPipeline::encode_prompt(const std::vector<std::string>& prompts,
                                         torch::Device device, PromptCache* cache) {
  OMNI_CHECK(has_text_encoder() && tokenizer_, ConfigError,
             "this WanPipeline has no text_encoder/tokenizer; pass prompt embeddings instead");
  const auto tokens = tokenize_prompts(*tokenizer_, prompts, max_sequence_length_);
  return encode_cached(
      cache, prompt_cache_encoder(), {tokens.input_ids, tokens.attention_mask}, device, [&] {
        // From page-locked memory without a host sync on a real device.
        const auto upload = [&](const torch::Tensor& t) {
          return device.is_cpu() ? t : t.pin_memory().to(device, /*non_blocking=*/true);
        };
        const auto ids = upload(tokens.input_ids);
        const auto mask = upload(tokens.attention_mask);
        auto hidden = text_encoder(ids, mask);  // runs the encoder's hooks
        // Trim to each prompt's real length and pad with zeros: the same as
        // zeroing every position the mask leaves out.
        hidden = hidden.masked_fill((mask == 0).unsqueeze(-1), 0);
        return hidden.to(transformer_dtype_);
      });
}

torch::Tensor WanPipeline::prepare_latents(std::int64_t batch, int height, int width,
                                           int num_frames, std::uint64_t seed,
                                           torch::Device device) const {
  return prepare_video_latents(transformer->config(), vae->config(), batch, height, width,
                               num_frames, seed, device);
}

DenoiseResult WanPipeline::denoise(const torch::Tensor& prompt_embeds,
                                   const torch::Tensor& negative_prompt_embeds,
                                   torch::Tensor latents, const DenoiseArgs& args,
                                   const StepObserver& observer, const ProgressFn& progress) {
  check_denoise_inputs(transformer->config(), prompt_embeds, negative_prompt_embeds, latents, args);
  const bool cfg = args.guidance_scale > 1.0;
  const double g1 = args.guidance_scale;
  const double g2 = args.guidance_scale_2.value_or(args.guidance_scale);

  const auto device = latents.device();
  // Each expert sees the embeddings (and latents) in its own dtype.
  const torch::ScalarType expert_dtype[2] = {transformer_dtype_, transformer_2_dtype_};
  torch::Tensor cond_embeds[2], uncond_embeds[2];
  for (int e = 0; e < 2; ++e) {
    cond_embeds[e] = prompt_embeds.to(device, expert_dtype[e]);
    if (cfg) uncond_embeds[e] = negative_prompt_embeds.to(device, expert_dtype[e]);
  }
  latents = latents.to(torch::kFloat32);  // prepare_latents' dtype, whatever the model's

  auto scheduler = make_scheduler(args.flow_shift);
  const auto boundary = boundary_timestep(args.boundary_ratio);
  return run_denoise_loop(
      *scheduler, latents, args.steps,
      [&](DenoiseStep& step, double t) {
        step.expert = !boundary || t >= *boundary ? 0 : 1;
        OMNI_INTERNAL_ASSERT(step.expert == 0 || has_transformer_2(),
                             "low-noise step without transformer_2");
        auto& model = step.expert == 0 ? transformer : transformer_2;
        step.guidance_scale = step.expert == 0 ? g1 : g2;
        const auto model_input = step.latents_in.to(expert_dtype[step.expert]);
        step.noise_pred_cond = model(model_input, step.timestep, cond_embeds[step.expert]);
        if (cfg)
          step.noise_pred_uncond = model(model_input, step.timestep, uncond_embeds[step.expert]);
      },
      observer, progress, args.first_step);
}

torch::Tensor WanPipeline::unnormalize_latents(const torch::Tensor& latents) const {
  return unnormalize_video_latents(vae->config(), latents, vae_dtype_);
}

torch::Tensor WanPipeline::decode(const torch::Tensor& z) {
  return vae->decode(z);
}

GenerationOutput WanPipeline::run(const GenerationRequest& r, const RunContext& ctx) {
  return std::move(run_batch({r}, ctx).front());
}

std::vector<GenerationOutput> WanPipeline::run_batch(const std::vector<GenerationRequest>& requests,
                                                     const RunContext& ctx) {
  OMNI_INTERNAL_ASSERT(!requests.empty(), "an empty batch");
  const auto& first = requests.front();
  for (const auto& r : requests)
    OMNI_INTERNAL_ASSERT(video_batch_key(r) == video_batch_key(first),
                         "requests of different shapes in one batch");
  const auto device = ctx.compute;
  const bool cfg = *first.guidance_scale > 1.0;
  // The encoder runs (and is resident) before any expert: every prompt now,
  // each at batch 1 as alone.
  std::vector<torch::Tensor> prompt_embeds, negative_embeds, latents;
  for (const auto& r : requests) {
    prompt_embeds.push_back(encode_prompt({r.prompt}, device, ctx.prompt_cache));
    if (cfg)
      negative_embeds.push_back(encode_prompt({r.negative_prompt}, device, ctx.prompt_cache));
  }
  for (const auto& r : requests)
    latents.push_back(prepare_latents(1, *r.height, *r.width, *r.num_frames, r.seed, device));
  DenoiseArgs args;
  args.steps = *first.steps;
  args.guidance_scale = *first.guidance_scale;
  args.guidance_scale_2 = first.guidance_scale_2;
  args.boundary_ratio = first.boundary_ratio;
  args.flow_shift = first.flow_shift;
  const auto result =
      denoise(torch::cat(prompt_embeds), cfg ? torch::cat(negative_embeds) : torch::Tensor(),
              torch::cat(latents), args, {}, ctx.progress);
  std::vector<GenerationOutput> outputs;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const auto mine = result.latents.narrow(0, static_cast<std::int64_t>(i), 1);
    const auto video = postprocess_video(decode(unnormalize_latents(mine)));
    outputs.push_back({to_uint8_frames(video)[0], *requests[i].fps});
  }
  return outputs;
}

}  // namespace omni::pipelines
