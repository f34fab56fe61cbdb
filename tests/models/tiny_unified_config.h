// The config.json of a tiny OmniUnifiedTransformer (shared by the model and
// pipeline tests): a 2-layer reasoner of width 16 and a 1-layer generator
// over 4 latent channels.
#pragma once

#include <nlohmann/json.hpp>

namespace tiny_unified {

inline nlohmann::json generator_config() {
  return {{"_class_name", "WanTransformer3DModel"},
          {"added_kv_proj_dim", nullptr},
          {"attention_head_dim", 8},
          {"cross_attn_norm", true},
          {"eps", 1e-6},
          {"ffn_dim", 32},
          {"freq_dim", 16},
          {"image_dim", nullptr},
          {"in_channels", 4},
          {"num_attention_heads", 2},
          {"num_layers", 1},
          {"out_channels", 4},
          {"patch_size", {1, 2, 2}},
          {"pos_embed_seq_len", nullptr},
          {"qk_norm", "rms_norm_across_heads"},
          {"rope_max_seq_len", 32},
          {"text_dim", 16}};
}

inline nlohmann::json transformer_config() {
  return {{"_class_name", "OmniUnifiedTransformer"},
          {"vocab_size", 64},
          {"max_tokens", 16},
          {"reasoner_dim", 16},
          {"reasoner_layers", 2},
          {"reasoner_heads", 2},
          {"reasoner_ffn", 32},
          {"generator", generator_config()}};
}

}  // namespace tiny_unified
