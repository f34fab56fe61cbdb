// UMT5Stack (as the encoder) and UMT5EncoderModel.
#include <torch/torch.h>

#include "models/wan/parameter_count.h"
#include "omni/cancel_point.h"
#include "omni/error.h"
#include "omni/models/wan/umt5_encoder.h"
#include "omni/nn/layers.h"

namespace omni::models::wan {

namespace {

const UMT5Config& validated(const UMT5Config& config) {
  config.validate();
  return config;
}

}  // namespace

UMT5StackImpl::UMT5StackImpl(const UMT5Config& config, torch::nn::Embedding shared_embedding)
    : config_(validated(config)) {
  embed_tokens = register_module("embed_tokens", std::move(shared_embedding));
  block = register_module("block", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < config_.num_layers; ++i) {
    UMT5Block b(config_);
    block->push_back(b);
    block_list_.push_back(b);
  }
  final_layer_norm = register_module("final_layer_norm",
                                     UMT5LayerNorm(config_.d_model, config_.layer_norm_epsilon));
}

torch::Tensor UMT5StackImpl::forward(const torch::Tensor& input_ids,
                                     const torch::Tensor& attention_mask) {
  const auto device = embed_tokens->weight.device();
  const auto ids = input_ids.to(device, torch::kLong);
  auto h = embed_tokens(ids);  // [B, L, d_model]
  const auto dtype = h.scalar_type();
  const auto batch = ids.size(0);
  const auto length = ids.size(1);

  // (1 − mask)·finfo.min over the keys, [B, 1, 1, L].
  torch::Tensor additive_mask;
  if (attention_mask.defined()) {
    const auto mask = attention_mask.to(device, dtype).reshape({batch, 1, 1, length});
    additive_mask = (1.0 - mask) * omni::nn::lowest_value(dtype);
  }
  const auto buckets =
      umt5_relative_position_buckets(length, length, config_.relative_attention_num_buckets,
                                     config_.relative_attention_max_distance, device);
  for (auto& b : block_list_) {
    cancel_point();  // Note [Cancel points inside a step]
    h = b(h, additive_mask, buckets);
  }
  return final_layer_norm(h);
}

UMT5EncoderModelImpl::UMT5EncoderModelImpl(const UMT5Config& config) : config_(validated(config)) {
  shared = register_module("shared", torch::nn::Embedding(config_.vocab_size, config_.d_model));
  encoder = register_module("encoder", UMT5Stack(config_, shared));
}

torch::Tensor UMT5EncoderModelImpl::forward(const torch::Tensor& input_ids,
                                            const torch::Tensor& attention_mask) {
  OMNI_CHECK(input_ids.defined() && input_ids.dim() == 2, InvalidRequest,
             "UMT5EncoderModel: input_ids must be [B, L]");
  OMNI_CHECK(!input_ids.is_floating_point() && !input_ids.is_complex(), InvalidRequest,
             "UMT5EncoderModel: input_ids must have an integer dtype, got ",
             input_ids.scalar_type());
  OMNI_CHECK(input_ids.size(1) > 0, InvalidRequest, "UMT5EncoderModel: empty input_ids");
  if (input_ids.numel() > 0) {
    const auto lo = input_ids.min().item<std::int64_t>();
    const auto hi = input_ids.max().item<std::int64_t>();
    OMNI_CHECK(lo >= 0 && hi < config_.vocab_size, InvalidRequest,
               "UMT5EncoderModel: token ids must lie in [0, ", config_.vocab_size, "), got [", lo,
               ", ", hi, "]");
  }
  OMNI_CHECK(!attention_mask.defined() || attention_mask.sizes() == input_ids.sizes(),
             InvalidRequest, "UMT5EncoderModel: attention_mask ", attention_mask.sizes(),
             " must match input_ids ", input_ids.sizes());
  return encoder(input_ids, attention_mask);
}

void UMT5EncoderModelImpl::load_weights(const io::Checkpoint& checkpoint,
                                        const io::LoadOptions& options) {
  io::load_state_dict(*this, checkpoint, {}, options);
}

std::int64_t UMT5EncoderModelImpl::parameter_count(const UMT5Config& c) {
  c.validate();
  // Note [Counting parameters without overflow] (parameter_count.h).
  return internal::count_parameters("UMT5EncoderModel", [&c](auto zero) {
    using N = decltype(zero);
    const N d_model = N(c.d_model);
    const N inner = N(c.num_heads) * N(c.d_kv);
    const N attention = 4 * d_model * inner + N(c.relative_attention_num_buckets) * N(c.num_heads);
    const N ffn = N(c.is_gated_act ? 3 : 2) * d_model * N(c.d_ff);
    const N block = attention + ffn + 2 * d_model;  // + two layer norms
    return N(c.vocab_size) * d_model + N(c.num_layers) * block + d_model;
  });
}

}  // namespace omni::models::wan
