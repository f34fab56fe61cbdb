// Pipelines: a module tree that declares its components (for offload) and
// runs one generation request.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "omni/nn/module.h"
#include "omni/offload/components.h"
#include "omni/pipelines/dtype_spec.h"

namespace omni::pipelines {

struct GenerationRequest {
  std::string prompt;
  std::string negative_prompt;
  std::uint64_t seed = 0;
  std::optional<int> steps;
  std::optional<int> width;
  std::optional<int> height;
  std::optional<int> num_frames;
  std::optional<double> guidance_scale;
  std::optional<double> guidance_scale_2;
  std::optional<int> fps;
  // vllm-omni's per-request overrides; nullopt: the model's own. The expert
  // switch, boundary_ratio × num_train_timesteps (two-expert models only,
  // in (0, 1)), and the scheduler's shift (FlowMatch `shift`, UniPC
  // `flow_shift`; positive).
  std::optional<double> boundary_ratio;
  std::optional<double> flow_shift;
};

// Called after every denoising step (step is 1-based).
using ProgressFn = std::function<void(int step, int total)>;

class PromptCache;  // prompt_cache.h

struct RunContext {
  torch::Device compute = torch::kCPU;
  ProgressFn progress;
  // Text-encoder outputs to reuse (Note [Prompt cache]); null: always encode.
  PromptCache* prompt_cache = nullptr;
};

struct GenerationOutput {
  torch::Tensor frames;  // uint8 [F, H, W, 3] on the host
  int fps = 16;
};

class Pipeline : public nn::Module {
 public:
  // model_index.json's `_class_name` (or the built-in example's name).
  virtual std::string class_name() const = 0;
  // The dotted paths of each role (the seed's SupportsComponentDiscovery).
  virtual offload::ComponentSpec components() const = 0;
  // Fills defaults and validates; InvalidRequest naming the bad field.
  virtual GenerationRequest resolve(const GenerationRequest& request) const = 0;
  // Runs a resolved request. Components are called through their holders so
  // offload hooks see every phase boundary.
  virtual GenerationOutput run(const GenerationRequest& request, const RunContext& context) = 0;
  // The component calls run() will make for a resolved request, in order:
  // one entry per forward (or decode) of a component of components(). The
  // offload backend streams ahead of it (OffloadBackend::set_schedule); an
  // empty list (the default) only costs that look-ahead.
  virtual std::vector<std::string> call_schedule(const GenerationRequest& request) const {
    return {};
  }

  // --- Phase-batched runs (Note [Phase-batched runs]) -----------------------

  // Resolved requests with the same key may run together in run_batch();
  // nullopt (the default): this request never batches.
  virtual std::optional<std::string> batch_key(const GenerationRequest& request) const {
    return std::nullopt;
  }
  // Runs resolved requests that share a batch key, one output per request in
  // order. context.progress is called once per step of the batch. The
  // default runs them one after another.
  virtual std::vector<GenerationOutput> run_batch(const std::vector<GenerationRequest>& requests,
                                                  const RunContext& context);
  // call_schedule() of a run_batch() over `requests`. The default: each
  // request's schedule in turn.
  virtual std::vector<std::string> batch_call_schedule(
      const std::vector<GenerationRequest>& requests) const;
  // Whether every prompt `request` encodes is in `cache` (its text encoder
  // would not run). Counts no hit. The default: false.
  virtual bool prompts_cached(const GenerationRequest& request, PromptCache& cache) const {
    return false;
  }
};

// Note [Phase-batched runs]
// Requests of the same shape (size, frames, steps, guidance, and so the same
// expert at every step) run through each phase together: every prompt is
// encoded while the encoder is resident, the latents of all requests (each
// drawn from its own seed exactly as alone) are concatenated along the batch
// and denoised by one expert call per forward, and each request's latents
// are decoded on their own. So a batch uploads each expert once, and each
// request gets the frames it would get alone up to the DiT's last bits: the
// encoder and the VAE run per request at batch 1, as alone (bitwise the
// same); only the DiT forward sees a larger batch, where its GEMMs
// accumulate in another order (on CPU: latents within ~1e-5, frames within
// one uint8 level; tests/engine/batch_engine_test.cpp measures it).

struct LoadOptions {
  // Per component; default auto: the stored dtype (Note [Dtype from the checkpoint]).
  DtypeSpec dtype;
  // The VAE decodes and encodes in overlapping tiles when a frame is larger
  // than a tile (Note [Tiled VAE], autoencoder_kl_wan.h).
  bool vae_tiling = true;
};

// Loads a model: a built-in "example:NAME" or a diffusers directory whose
// model_index.json `_class_name` is registered. ConfigError/FormatError with
// the reason otherwise.
std::shared_ptr<Pipeline> load_pipeline(const std::string& model, const LoadOptions& options = {});

// Names accepted by load_pipeline for built-in examples.
std::vector<std::string> builtin_models();

using PipelineFactory =
    std::function<std::shared_ptr<Pipeline>(const std::filesystem::path& dir, const LoadOptions&)>;
// Registers a pipeline class for model_index.json `_class_name`.
void register_pipeline(const std::string& class_name, PipelineFactory factory);

}  // namespace omni::pipelines
