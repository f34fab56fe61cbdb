// OmniUnifiedTransformer: one transformer split into two mutually exclusive
// sub-components that run in different phases (the seed's Cosmos3 case):
//
//   reasoner   OmniReasoner (omni_reasoner.h): reads the prompt's tokens
//              once, returns hidden states [B, L, reasoner_dim];
//   generator  models::wan::WanTransformer3DModel, unchanged: the DiT run at
//              every denoising step, cross-attending to those hidden states
//              (its text_dim is reasoner_dim).
//
// The module holds nothing but the two, so each can be offloaded on its own
// (OmniUnifiedPipeline registers them as split components). Checkpoint keys:
// `reasoner.*` (omni_reasoner.h) and `generator.*`, the latter exactly the
// diffusers WanTransformer3DModel keys under that prefix.
//
// Usage:
//   auto config = OmniUnifiedTransformerConfig::from_file(dir / "config.json");
//   OmniUnifiedTransformer model(config);
//   model->to_inference_dtype(torch::kBFloat16);            // before loading
//   model->load_weights(io::Checkpoint::open_dir(dir));
//   torch::InferenceMode guard;
//   auto context = model->reasoner(input_ids, attention_mask);       // once
//   auto noise_pred = model->generator(latents, timestep, context);  // every step
//
// Both are called through their holders, so pre-forward hooks see each phase.
// Synchronous, caller's thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "omni/io/checkpoint.h"
#include "omni/models/unified/omni_reasoner.h"
#include "omni/models/unified/omni_unified_config.h"
#include "omni/models/wan/wan_transformer.h"
#include "omni/nn/module.h"

namespace omni::models::unified {

class OmniUnifiedTransformerImpl : public omni::nn::Module {
 public:
  // Builds both sub-components (random weights); ConfigError when the config
  // is invalid.
  explicit OmniUnifiedTransformerImpl(const OmniUnifiedTransformerConfig& config);

  const OmniUnifiedTransformerConfig& config() const { return config_; }

  // Buffers computed at construction, never stored (the generator's RoPE
  // tables): load_state_dict's skip_buffers.
  static std::vector<std::string> non_persistent_buffers();

  // load_state_dict with non_persistent_buffers(): FormatError naming the
  // tensor (with its `reasoner.` / `generator.` prefix) on a missing,
  // unexpected or mis-shaped key; nothing is modified unless all fit.
  void load_weights(const io::Checkpoint& checkpoint, const io::LoadOptions& options = {});

  // The reasoner in `dtype` (its norms and softmax upcast half types
  // themselves); the generator as WanTransformer3DModel::to_inference_dtype
  // (diffusers' float32 modules stay float32). Call before loading.
  void to_inference_dtype(torch::ScalarType dtype);

  // Parameters of a model of this config, by arithmetic (no allocation).
  static std::int64_t parameter_count(const OmniUnifiedTransformerConfig& config);

  OmniReasoner reasoner{nullptr};
  models::wan::WanTransformer3DModel generator{nullptr};

 private:
  OmniUnifiedTransformerConfig config_;
};
OMNI_MODULE(OmniUnifiedTransformer);

}  // namespace omni::models::unified
