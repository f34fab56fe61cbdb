// WanTransformer3DModel: the Wan2.x video DiT (diffusers
// models/transformers/transformer_wan.py), text-to-video layout (no image
// branch). Parameter names equal the diffusers checkpoint keys.
//
// Usage:
//   auto config = WanTransformer3DConfig::from_file(dir / "config.json");
//   WanTransformer3DModel dit(config);
//   dit->to_inference_dtype(torch::kBFloat16);       // before loading: no f32 copy
//   dit->load_weights(io::Checkpoint::open_dir(dir));
//   torch::InferenceMode guard;
//   auto noise_pred = dit(latents, timestep, prompt_embeds);   // runs pre-hooks
#pragma once

#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include <cstdint>
#include <string>
#include <vector>

#include "omni/io/checkpoint.h"
#include "omni/models/wan/wan_transformer_config.h"
#include "omni/models/wan/wan_transformer_layers.h"
#include "omni/nn/layers.h"
#include "omni/nn/module.h"

namespace omni::models::wan {

class WanTransformer3DModelImpl : public omni::nn::Module {
 public:
  // Builds the module (random weights); ConfigError when the config is invalid.
  explicit WanTransformer3DModelImpl(const WanTransformer3DConfig& config);

  // hidden_states [B, C_in, F, H, W] (F, H, W multiples of the patch size);
  // timestep [B] (or [1]) — one per item, Wan2.1/2.2-A14B — or [B, tokens]
  // with tokens = (F/p_t)(H/p_h)(W/p_w) in frame-major order — one per token,
  // Wan2.2-TI2V; any numeric dtype; encoder_hidden_states [B, L, text_dim].
  // Inputs are cast to the weights' dtype. Returns [B, C_out, F, H, W] in that
  // dtype. InvalidRequest on shapes that do not fit. Synchronous, caller's thread.
  torch::Tensor forward(const torch::Tensor& hidden_states, const torch::Tensor& timestep,
                        const torch::Tensor& encoder_hidden_states);

  const WanTransformer3DConfig& config() const { return config_; }

  // The transformer blocks in execution order (holders: calling one runs its hooks).
  const std::vector<WanTransformerBlock>& transformer_blocks() const { return block_list_; }
  std::vector<WanTransformerBlock>& transformer_blocks() { return block_list_; }

  // Buffers that are computed at construction and never stored in a
  // checkpoint; pass them as load_state_dict's skip_buffers.
  static std::vector<std::string> non_persistent_buffers();

  // load_state_dict with non_persistent_buffers(): FormatError naming the
  // tensor on a missing, unexpected or mis-shaped key.
  void load_weights(const io::Checkpoint& checkpoint, const io::LoadOptions& options = {});

  // Casts parameters and buffers to `dtype`, except, for half types, what
  // diffusers keeps in float32 when it loads reduced precision
  // (_keep_in_fp32_modules: rope, time_embedder, scale_shift_table,
  // norm1/norm2/norm3). The blocks then compute in `dtype`. Call before loading.
  void to_inference_dtype(torch::ScalarType dtype);

  // Number of parameters a model of this config holds, by arithmetic (no
  // allocation): 14,288,491,584 for Wan2.2-T2V-A14B.
  static std::int64_t parameter_count(const WanTransformer3DConfig& config);

  WanRotaryPosEmbed rope{nullptr};
  torch::nn::Conv3d patch_embedding{nullptr};
  WanTimeTextEmbedding condition_embedder{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  omni::nn::FP32LayerNorm norm_out{nullptr};
  torch::nn::Linear proj_out{nullptr};
  torch::Tensor scale_shift_table;  // [1, 2, dim]: shift, scale of the output norm

 private:
  WanTransformer3DConfig config_;
  std::vector<WanTransformerBlock> block_list_;
};
OMNI_MODULE(WanTransformer3DModel);

}  // namespace omni::models::wan
