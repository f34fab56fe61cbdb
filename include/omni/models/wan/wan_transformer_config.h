// WanTransformer3DConfig: the typed form of a diffusers WanTransformer3DModel
// `config.json` (transformer/ and transformer_2/ of a Wan2.x directory).
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace omni::models::wan {

struct WanTransformer3DConfig {
  // Field names and defaults follow diffusers' WanTransformer3DModel.__init__
  // (the defaults are the Wan2.1-14B / Wan2.2-T2V-A14B values).
  std::array<std::int64_t, 3> patch_size{1, 2, 2};  // (t, h, w)
  std::int64_t num_attention_heads = 40;
  std::int64_t attention_head_dim = 128;
  std::int64_t in_channels = 16;
  std::int64_t out_channels = 16;  // null in config.json means in_channels
  std::int64_t text_dim = 4096;
  std::int64_t freq_dim = 256;
  std::int64_t ffn_dim = 13824;
  std::int64_t num_layers = 40;
  bool cross_attn_norm = true;
  std::string qk_norm = "rms_norm_across_heads";
  double eps = 1e-6;
  std::int64_t rope_max_seq_len = 1024;
  // Image-to-video branch (Wan2.1 I2V / FLF2V): not implemented; must be null.
  std::optional<std::int64_t> image_dim;
  std::optional<std::int64_t> added_kv_proj_dim;
  std::optional<std::int64_t> pos_embed_seq_len;

  std::int64_t inner_dim() const { return num_attention_heads * attention_head_dim; }
  std::int64_t patch_volume() const { return patch_size[0] * patch_size[1] * patch_size[2]; }
  // RoPE split of one head: (t, h, w) channels, as WanRotaryPosEmbed computes it.
  std::array<std::int64_t, 3> rope_split() const;

  // Reads every field strictly: ConfigError naming `source` and the field when
  // a required field is missing, a field is unknown or has the wrong type, or
  // a value is one this implementation does not support. Runs validate().
  static WanTransformer3DConfig from_json(const nlohmann::json& json, const std::string& source);
  static WanTransformer3DConfig from_file(const std::filesystem::path& config_json);

  // ConfigError naming the field when a value is out of range or unsupported.
  void validate() const;
};

}  // namespace omni::models::wan
