// UMT5Config: the typed form of a transformers UMT5 `config.json` (the Wan
// pipelines' text_encoder/), as far as the encoder needs it.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <string>

namespace omni::models::wan {

// Activation of the feed-forward layers (transformers' ACT2FN names).
enum class UMT5Activation {
  kGeluTanh,  // "gelu_new", "gelu_pytorch_tanh" (what "gated-gelu" selects)
  kGelu,      // "gelu": exact erf form
  kRelu,      // "relu"
  kSilu,      // "silu", "swish"
};

struct UMT5Config {
  // Defaults are transformers' UMT5Config defaults; the UMT5-XXL encoder of the
  // Wan pipelines uses vocab 256384, d_model 4096, d_kv 64, d_ff 10240,
  // 24 layers, 64 heads.
  std::int64_t vocab_size = 250112;
  std::int64_t d_model = 512;
  std::int64_t d_kv = 64;
  std::int64_t d_ff = 1024;
  std::int64_t num_layers = 8;
  std::int64_t num_heads = 6;
  std::int64_t relative_attention_num_buckets = 32;
  std::int64_t relative_attention_max_distance = 128;
  double layer_norm_epsilon = 1e-6;
  std::string feed_forward_proj = "gated-gelu";
  // Derived from feed_forward_proj unless config.json states them (as
  // transformers does: stated values win).
  UMT5Activation dense_act_fn = UMT5Activation::kGeluTanh;
  bool is_gated_act = true;
  // Read for completeness; the encoder does not use them.
  std::int64_t pad_token_id = 0;
  std::int64_t eos_token_id = 1;
  double dropout_rate = 0.1;  // inference: dropout is inactive

  std::int64_t inner_dim() const { return num_heads * d_kv; }

  // Strict reading: ConfigError naming `source` and the field when a required
  // field is missing, a field is unknown or mistyped, or a value is not
  // supported. Runs validate().
  static UMT5Config from_json(const nlohmann::json& json, const std::string& source);
  static UMT5Config from_file(const std::filesystem::path& config_json);

  // ConfigError naming the field when a value is out of range.
  void validate() const;
};

// "gelu_new" → kGeluTanh, …; ConfigError naming `field` for anything else.
UMT5Activation umt5_activation_from_string(const std::string& name, const std::string& field);

}  // namespace omni::models::wan
