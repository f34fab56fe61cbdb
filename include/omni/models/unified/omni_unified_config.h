// OmniUnifiedTransformerConfig: the typed form of an OmniUnifiedTransformer
// `config.json` (transformer/ of an OmniUnifiedPipeline directory):
//
//   {"_class_name": "OmniUnifiedTransformer",
//    "vocab_size": 128, "max_tokens": 32,
//    "reasoner_dim": 64, "reasoner_layers": 2, "reasoner_heads": 4, "reasoner_ffn": 256,
//    "generator": { ...a complete WanTransformer3DModel config.json... }}
//
// Every field is required; `generator.text_dim` must equal `reasoner_dim`
// (the generator cross-attends to the reasoner's hidden states).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <string>

#include "omni/models/wan/wan_transformer_config.h"

namespace omni::models::unified {

struct OmniUnifiedTransformerConfig {
  std::int64_t vocab_size = 128;  // token embedding rows (the tokenizer's ids are below it)
  std::int64_t max_tokens = 32;   // learned positions: the longest prompt, EOS included
  std::int64_t reasoner_dim = 64;
  std::int64_t reasoner_layers = 2;
  std::int64_t reasoner_heads = 4;  // must divide reasoner_dim
  std::int64_t reasoner_ffn = 256;  // hidden width of each block's MLP
  models::wan::WanTransformer3DConfig generator;

  // RMSNorm epsilon of the reasoner (fixed; not a config field).
  static constexpr double kReasonerEps = 1e-6;

  std::int64_t reasoner_head_dim() const { return reasoner_dim / reasoner_heads; }

  // Strict reading: ConfigError naming `source` and the field when a field is
  // missing, unknown, mistyped or out of range; generator fields are named
  // "field 'generator': field 'x'". Runs validate().
  static OmniUnifiedTransformerConfig from_json(const nlohmann::json& json,
                                                const std::string& source);
  static OmniUnifiedTransformerConfig from_file(const std::filesystem::path& config_json);

  // ConfigError naming the field when a value is out of range, the sizes
  // overflow, or generator.text_dim differs from reasoner_dim.
  void validate() const;
};

}  // namespace omni::models::unified
