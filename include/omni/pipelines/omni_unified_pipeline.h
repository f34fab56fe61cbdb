// OmniUnifiedPipeline: text-to-video with a split model (the seed's Cosmos3
// case), one OmniUnifiedTransformer whose `reasoner` reads the prompt once
// and whose `generator` (a WanTransformer3DModel) denoises Wan latents,
// over a diffusers-style directory:
//
//   model_index.json            _class_name "OmniUnifiedPipeline"; entries
//                               tokenizer, transformer, vae, scheduler (all required)
//   tokenizer/spiece.model      SentencePiece, T5 conventions (io/tokenizer.h)
//   transformer/config.json     OmniUnifiedTransformer (models/unified/omni_unified_config.h)
//   transformer/diffusion_pytorch_model.safetensors
//                               one file: `reasoner.*` and `generator.*` (the
//                               WanTransformer3DModel's diffusers keys under that prefix)
//   vae/                        AutoencoderKLWan
//   scheduler/scheduler_config.json   FlowMatchEulerDiscreteScheduler (or UniPC)
//   omni_defaults.json          optional request defaults (Note [omni_defaults.json])
//
// The run (Note [OmniUnifiedPipeline run]):
//
//   auto pipe = OmniUnifiedPipeline::load(dir);
//   auto out = pipe->run(pipe->resolve({.prompt = "a red circle moving right", .seed = 7}), {});
//
// Model-level CPU offload: the pipeline implements SupportsModelCpuOffload,
// so ModelLevelOffloadBackend delegates to it. `reasoner` and `generator`
// are mutually exclusive split components (only the running one is on the
// device; per request the reasoner is uploaded once, then the generator
// once), the VAE stays resident. An explicit selection
// (OffloadOptions::split_components) swaps only the named ones; the others
// stay resident. Other backends (all-resident) see the components() lists.
//
// Threading: one run at a time per pipeline (the engine's worker thread);
// every call is synchronous on the caller's thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "omni/io/tokenizer.h"
#include "omni/models/unified/omni_unified_transformer.h"
#include "omni/models/wan/autoencoder_kl_wan.h"
#include "omni/offload/split_model.h"
#include "omni/pipelines/pipeline.h"
#include "omni/pipelines/wan_video_stages.h"
#include "omni/schedulers/scheduler.h"

namespace omni::pipelines {

// Note [OmniUnifiedPipeline run]
//   1. tokenize [prompt] (+ [negative_prompt] when guidance_scale > 1) to
//      max_tokens, and run the reasoner ONCE on that batch inside
//      OffloadContext("reasoner"): hidden states zero past each prompt;
//   2. initial noise as WanPipeline (prepare_video_latents, CPU generator);
//   3. each step, inside OffloadContext("generator"): cond and uncond
//      generator calls of batch 1 and pred = uncond + g·(cond − uncond)
//      (Note [WanPipeline loop] with one expert and one guidance_scale);
//   4. un-normalise, VAE decode, frames.
// Entering the active context moves nothing, so the generator is uploaded at
// the first step and stays for the rest.

class OmniUnifiedPipeline final : public Pipeline, public offload::SupportsModelCpuOffload {
 public:
  // Loads a directory (see the file comment). Strict like WanPipeline::load:
  // unknown model_index fields, unsupported classes and components that do
  // not fit together (generator channels vs VAE z_dim, tokenizer pieces vs
  // vocab_size) are ConfigErrors; missing folders, files or tensors,
  // unexpected or mis-shaped tensors are FormatErrors naming them. Each
  // component in options.dtype's choice for it, by default its stored dtype
  // (Note [Dtype from the checkpoint]).
  static std::shared_ptr<OmniUnifiedPipeline> load(const std::filesystem::path& dir,
                                                   const LoadOptions& options = {});

  std::string class_name() const override { return "OmniUnifiedPipeline"; }
  // For backends that discover components: encoder transformer.reasoner,
  // DiT transformer.generator, VAE vae.
  offload::ComponentSpec components() const override;
  // Fills the defaults and validates like WanPipeline::resolve
  // (resolve_video_request): InvalidRequest naming the field; a
  // guidance_scale_2 is rejected (one generator, one guidance scale).
  GenerationRequest resolve(const GenerationRequest& request) const override;
  // Note [OmniUnifiedPipeline run]. frames: uint8 [F, H, W, 3].
  GenerationOutput run(const GenerationRequest& request, const RunContext& context) override;

  // --- SupportsModelCpuOffload (split_model.h) ------------------------------

  // Validates options.components against split_component_names() before
  // registering anything (ConfigError listing the known names), then
  // registers the selected sub-components as exclusive and the rest plus the
  // VAE as resident.
  void enable_omni_model_cpu_offload(const offload::ModelCpuOffloadOptions& options) override;
  void disable_omni_model_cpu_offload() noexcept override { host_ = nullptr; }
  // "reasoner", "generator".
  static const std::vector<std::string>& split_component_names();

  // --- Building blocks of run(), usable on their own -----------------------

  // The reasoner's hidden states [B, max_tokens, reasoner_dim] for `prompts`
  // (cleaned, tokenized, one reasoner call inside OffloadContext("reasoner")),
  // zero past each prompt's length, in the transformer's dtype on `device`.
  torch::Tensor encode_prompt(const std::vector<std::string>& prompts, torch::Device device);

  // The loop of Note [OmniUnifiedPipeline run] step 3 from `latents`; every
  // step runs inside OffloadContext("generator"). args.guidance_scale_2 must
  // be unset. InvalidRequest on shapes that do not fit.
  DenoiseResult denoise(const torch::Tensor& prompt_embeds,
                        const torch::Tensor& negative_prompt_embeds, torch::Tensor latents,
                        const DenoiseArgs& args, const StepObserver& observer = {},
                        const ProgressFn& progress = {});

  // A fresh scheduler from the directory's scheduler config.
  std::unique_ptr<schedulers::Scheduler> make_scheduler() const;

  const WanDefaults& defaults() const { return defaults_; }
  torch::ScalarType transformer_dtype() const { return transformer_dtype_; }
  torch::ScalarType vae_dtype() const { return vae_dtype_; }
  // The host offload contexts talk to; null while offload is off.
  offload::SplitOffloadHost* offload_host() const { return host_; }

  // Components (holders: calling them runs their hooks).
  models::unified::OmniUnifiedTransformer transformer{nullptr};
  models::wan::AutoencoderKLWan vae{nullptr};

 private:
  OmniUnifiedPipeline() = default;

  WanDefaults defaults_ = WanDefaults::single_expert();
  std::optional<io::Tokenizer> tokenizer_;
  nlohmann::json scheduler_config_;
  std::string scheduler_source_;
  torch::ScalarType transformer_dtype_ = torch::kFloat32;
  torch::ScalarType vae_dtype_ = torch::kFloat32;
  offload::SplitOffloadHost* host_ = nullptr;
};

// The registry's factory for model_index.json `_class_name` "OmniUnifiedPipeline".
std::shared_ptr<Pipeline> load_omni_unified_pipeline(const std::filesystem::path& dir,
                                                     const LoadOptions& options);

}  // namespace omni::pipelines
