// OmniUnifiedPipeline: request validation, the split-model offload
// lifecycle, prompt reasoning and the denoising loop
// (Note [OmniUnifiedPipeline run]).
#include "omni/pipelines/omni_unified_pipeline.h"

#include <algorithm>

#include "omni/error.h"

namespace omni::pipelines {

const std::vector<std::string>& OmniUnifiedPipeline::split_component_names() {
  static const std::vector<std::string> names = {"reasoner", "generator"};
  return names;
}

offload::ComponentSpec OmniUnifiedPipeline::components() const {
  offload::ComponentSpec spec;
  spec.dit_modules.push_back("transformer.generator");
  spec.encoder_modules.push_back("transformer.reasoner");
  spec.vae_modules.push_back("vae");
  return spec;
}

void OmniUnifiedPipeline::enable_omni_model_cpu_offload(
    const offload::ModelCpuOffloadOptions& options) {
  OMNI_INTERNAL_ASSERT(options.host != nullptr, "enable_omni_model_cpu_offload without a host");
  const auto& known = split_component_names();
  // The whole selection is checked before anything is registered.
  for (const auto& name : options.components) {
    if (std::find(known.begin(), known.end(), name) != known.end()) continue;
    std::string list;
    for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
    throw ConfigError(
        detail::concat("OmniUnifiedPipeline: unknown split component '", name, "'; known: ", list));
  }
  const auto selected = [&](const std::string& name) {
    return options.components.empty() ||
           std::find(options.components.begin(), options.components.end(), name) !=
               options.components.end();
  };
  std::vector<offload::NamedModule> exclusive, resident;
  for (const auto& [name, module] : std::vector<offload::NamedModule>{
           {"reasoner", transformer->reasoner.ptr()}, {"generator", transformer->generator.ptr()}})
    (selected(name) ? exclusive : resident).emplace_back(name, module);
  resident.emplace_back("vae", vae.ptr());
  options.host->register_split_components(exclusive, resident);
  host_ = options.host;
}

GenerationRequest OmniUnifiedPipeline::resolve(const GenerationRequest& in) const {
  OMNI_CHECK(!in.guidance_scale_2, InvalidRequest,
             "guidance_scale_2 needs a two-expert model; OmniUnifiedPipeline has a single "
             "generator (use guidance_scale)");
  OMNI_CHECK(!in.boundary_ratio, InvalidRequest,
             "boundary_ratio needs a two-expert model; OmniUnifiedPipeline has a single generator");
  OMNI_CHECK(!in.flow_shift, InvalidRequest,
             "flow_shift: OmniUnifiedPipeline uses its scheduler config's shift; omit it");
  return resolve_video_request(in, defaults_, transformer->generator->config(), vae->config(),
                               /*two_experts=*/false);
}

std::unique_ptr<schedulers::Scheduler> OmniUnifiedPipeline::make_scheduler() const {
  return schedulers::make_scheduler(scheduler_config_, scheduler_source_);
}

torch::Tensor OmniUnifiedPipeline::encode_prompt(const std::vector<std::string>& prompts,
                                                 torch::Device device) {
  OMNI_INTERNAL_ASSERT(tokenizer_.has_value(), "OmniUnifiedPipeline without a tokenizer");
  const auto tokens = tokenize_prompts(*tokenizer_, prompts, transformer->config().max_tokens);
  offload::OffloadContext context(host_, "reasoner");
  // Zero past each prompt's length (the reasoner's contract).
  const auto hidden =
      transformer->reasoner(tokens.input_ids.to(device), tokens.attention_mask.to(device));
  return hidden.to(transformer_dtype_);
}

DenoiseResult OmniUnifiedPipeline::denoise(const torch::Tensor& prompt_embeds,
                                           const torch::Tensor& negative_prompt_embeds,
                                           torch::Tensor latents, const DenoiseArgs& args,
                                           const StepObserver& observer,
                                           const ProgressFn& progress) {
  auto& generator = transformer->generator;
  check_denoise_inputs(generator->config(), prompt_embeds, negative_prompt_embeds, latents, args);
  OMNI_CHECK(!args.guidance_scale_2, InvalidRequest,
             "guidance_scale_2: OmniUnifiedPipeline has a single generator");
  const bool cfg = args.guidance_scale > 1.0;
  const auto device = latents.device();
  const auto cond_embeds = prompt_embeds.to(device, transformer_dtype_);
  const auto uncond_embeds =
      cfg ? negative_prompt_embeds.to(device, transformer_dtype_) : torch::Tensor();
  latents = latents.to(torch::kFloat32);

  auto scheduler = make_scheduler();
  return run_denoise_loop(
      *scheduler, latents, args.steps,
      [&](DenoiseStep& step, double) {
        offload::OffloadContext context(host_, "generator");
        step.guidance_scale = args.guidance_scale;
        const auto model_input = step.latents_in.to(transformer_dtype_);
        step.noise_pred_cond = generator(model_input, step.timestep, cond_embeds);
        if (cfg) step.noise_pred_uncond = generator(model_input, step.timestep, uncond_embeds);
      },
      observer, progress, args.first_step);
}

GenerationOutput OmniUnifiedPipeline::run(const GenerationRequest& r, const RunContext& ctx) {
  const auto device = ctx.compute;
  const bool cfg = *r.guidance_scale > 1.0;
  // The reasoner reads both prompts in one call, before any generator step.
  std::vector<std::string> prompts = {r.prompt};
  if (cfg) prompts.push_back(r.negative_prompt);
  const auto hidden = encode_prompt(prompts, device);
  const auto prompt_embeds = hidden.narrow(0, 0, 1);
  const auto negative_embeds = cfg ? hidden.narrow(0, 1, 1) : torch::Tensor();
  const auto& generator_config = transformer->generator->config();
  auto latents = prepare_video_latents(generator_config, vae->config(), 1, *r.height, *r.width,
                                       *r.num_frames, r.seed, device);
  DenoiseArgs args;
  args.steps = *r.steps;
  args.guidance_scale = *r.guidance_scale;
  const auto result = denoise(prompt_embeds, negative_embeds, latents, args, {}, ctx.progress);
  const auto z = unnormalize_video_latents(vae->config(), result.latents, vae_dtype_);
  const auto video = postprocess_video(vae->decode(z));
  return {to_uint8_frames(video)[0], *r.fps};
}

}  // namespace omni::pipelines
