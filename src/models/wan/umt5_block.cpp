// UMT5LayerSelfAttention, UMT5LayerFF and the UMT5Block that chains them.
#include <torch/torch.h>

#include "omni/models/wan/umt5_layers.h"

namespace omni::models::wan {

UMT5LayerSelfAttentionImpl::UMT5LayerSelfAttentionImpl(const UMT5Config& config) {
  SelfAttention = register_module("SelfAttention", UMT5Attention(config));
  layer_norm =
      register_module("layer_norm", UMT5LayerNorm(config.d_model, config.layer_norm_epsilon));
}

torch::Tensor UMT5LayerSelfAttentionImpl::forward(const torch::Tensor& x,
                                                  const torch::Tensor& additive_mask,
                                                  const torch::Tensor& buckets) {
  return x + SelfAttention(layer_norm(x), additive_mask, buckets);
}

UMT5LayerFFImpl::UMT5LayerFFImpl(const UMT5Config& config) {
  DenseReluDense = register_module("DenseReluDense", UMT5DenseActDense(config));
  layer_norm =
      register_module("layer_norm", UMT5LayerNorm(config.d_model, config.layer_norm_epsilon));
}

torch::Tensor UMT5LayerFFImpl::forward(const torch::Tensor& x) {
  return x + DenseReluDense(layer_norm(x));
}

namespace {
// transformers clamps float16 activations so that an overflow does not
// propagate as inf: to max − 1000 when something already overflowed.
torch::Tensor clamp_half(const torch::Tensor& x) {
  if (x.scalar_type() != torch::kHalf) return x;
  // A device-side choice (no host sync), as in the reference.
  const double max = 65504.0;
  const auto limit = torch::where(torch::isinf(x).any(), max - 1000.0, max);
  return torch::clamp(x, c10::optional<torch::Tensor>(-limit), c10::optional<torch::Tensor>(limit));
}
}  // namespace

UMT5BlockImpl::UMT5BlockImpl(const UMT5Config& config) {
  self_attention_ = UMT5LayerSelfAttention(config);
  feed_forward_ = UMT5LayerFF(config);
  layer = register_module("layer", torch::nn::ModuleList(self_attention_, feed_forward_));
}

torch::Tensor UMT5BlockImpl::forward(const torch::Tensor& x, const torch::Tensor& additive_mask,
                                     const torch::Tensor& buckets) {
  auto h = clamp_half(self_attention_(x, additive_mask, buckets));
  return clamp_half(feed_forward_(h));
}

}  // namespace omni::models::wan
