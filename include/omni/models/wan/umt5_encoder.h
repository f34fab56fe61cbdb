// UMT5EncoderModel: the encoder half of transformers' UMT5 (the Wan
// pipelines' text encoder, UMT5-XXL). Parameter names equal the checkpoint
// keys: `shared.weight`, `encoder.embed_tokens.weight` (the same tensor),
// `encoder.block.N.layer.…`, `encoder.final_layer_norm.weight`.
//
// Usage:
//   UMT5EncoderModel te(UMT5Config::from_file(dir / "config.json"));
//   te->to(torch::kBFloat16);
//   te->load_weights(io::Checkpoint::open_dir(dir, "model"));
//   torch::InferenceMode guard;
//   auto embeds = te(input_ids, attention_mask);   // [B, L, d_model]
#pragma once

#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>

#include <cstdint>
#include <vector>

#include "omni/io/checkpoint.h"
#include "omni/models/wan/umt5_config.h"
#include "omni/models/wan/umt5_layers.h"
#include "omni/nn/module.h"

namespace omni::models::wan {

// UMT5Stack as the encoder: token embedding, the blocks, final_layer_norm.
class UMT5StackImpl : public omni::nn::Module {
 public:
  // `embed_tokens` is shared with the owner (registered here under that name too).
  UMT5StackImpl(const UMT5Config& config, torch::nn::Embedding embed_tokens);
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask);

  const std::vector<UMT5Block>& encoder_blocks() const { return block_list_; }
  std::vector<UMT5Block>& encoder_blocks() { return block_list_; }

  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::ModuleList block{nullptr};
  UMT5LayerNorm final_layer_norm{nullptr};

 private:
  UMT5Config config_;
  std::vector<UMT5Block> block_list_;
};
OMNI_MODULE(UMT5Stack);

class UMT5EncoderModelImpl : public omni::nn::Module {
 public:
  // Builds the module (random weights); ConfigError when the config is invalid.
  explicit UMT5EncoderModelImpl(const UMT5Config& config);

  // input_ids [B, L] of any integer dtype (ids < vocab_size); attention_mask
  // [B, L], 1 for real tokens and 0 for padding, any numeric dtype, or
  // undefined for no padding. Padded keys are masked out by adding
  // (1 − mask)·lowest(dtype); padded query rows are computed like the others.
  // Returns last_hidden_state [B, L, d_model] in the weights' dtype.
  // InvalidRequest on bad shapes or ids. Synchronous, caller's thread.
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask = {});

  const UMT5Config& config() const { return config_; }

  // load_state_dict: the checkpoint may hold `shared.weight`,
  // `encoder.embed_tokens.weight` or both (they are one tensor).
  void load_weights(const io::Checkpoint& checkpoint, const io::LoadOptions& options = {});

  // Number of distinct parameters, by arithmetic (no allocation); the tied
  // embedding counts once: 5,680,910,336 for the UMT5-XXL encoder.
  static std::int64_t parameter_count(const UMT5Config& config);

  torch::nn::Embedding shared{nullptr};
  UMT5Stack encoder{nullptr};

 private:
  UMT5Config config_;
};
OMNI_MODULE(UMT5EncoderModel);

}  // namespace omni::models::wan
