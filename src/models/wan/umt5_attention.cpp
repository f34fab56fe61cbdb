// UMT5Attention (encoder self-attention) and its relative-position buckets.
#include <torch/torch.h>

#include <cmath>

#include "omni/models/wan/umt5_layers.h"
#include "omni/nn/layers.h"

namespace omni::models::wan {

torch::Tensor umt5_relative_position_buckets(std::int64_t query_length, std::int64_t key_length,
                                             std::int64_t num_buckets, std::int64_t max_distance,
                                             const torch::Device& device) {
  const auto options = torch::TensorOptions().dtype(torch::kLong).device(device);
  const auto context = torch::arange(query_length, options).unsqueeze(1);
  const auto memory = torch::arange(key_length, options).unsqueeze(0);
  const auto relative = memory - context;  // key − query

  // Same operations, in the same dtypes, as transformers'
  // UMT5Attention._relative_position_bucket with is_decoder=False, so that
  // positions on a bucket boundary round the same way.
  const std::int64_t half = num_buckets / 2;
  auto buckets = (relative > 0).to(torch::kLong) * half;
  const auto distance = relative.abs();
  const std::int64_t max_exact = half / 2;
  const auto is_small = distance < max_exact;
  // log(0) only occurs where is_small selects the exact branch; clamping keeps
  // the unused entries finite before the integer conversion.
  const auto log_ratio = torch::log(distance.clamp_min(1).to(torch::kFloat) / max_exact) /
                         std::log(static_cast<double>(max_distance) / max_exact) *
                         (half - max_exact);
  auto large = max_exact + log_ratio.to(torch::kLong);
  large = torch::min(large, torch::full_like(large, half - 1));
  return buckets + torch::where(is_small, distance, large);
}

UMT5AttentionImpl::UMT5AttentionImpl(const UMT5Config& config)
    : heads_(config.num_heads), d_kv_(config.d_kv) {
  const auto inner = config.inner_dim();
  auto linear = [](std::int64_t in, std::int64_t out) {
    return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false));
  };
  q = register_module("q", linear(config.d_model, inner));
  k = register_module("k", linear(config.d_model, inner));
  v = register_module("v", linear(config.d_model, inner));
  o = register_module("o", linear(inner, config.d_model));
  relative_attention_bias = register_module(
      "relative_attention_bias",
      torch::nn::Embedding(config.relative_attention_num_buckets, config.num_heads));
}

torch::Tensor UMT5AttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& additive_mask,
                                         const torch::Tensor& buckets) {
  const auto batch = x.size(0);
  const auto length = x.size(1);
  auto split = [&](const torch::Tensor& t) {
    return t.reshape({batch, -1, heads_, d_kv_}).transpose(1, 2);  // [B, H, L, d_kv]
  };
  // [1, H, L, L]: each layer has its own table (UMT5; T5 shares the first).
  auto bias = relative_attention_bias(buckets).permute({2, 0, 1}).unsqueeze(0);
  if (additive_mask.defined()) bias = bias + additive_mask;
  // T5 folds the 1/√d_kv scaling into the initialisation: scores are q·kᵀ.
  auto out = omni::nn::eager_attention(split(q(x)), split(k(x)), split(v(x)), bias, 1.0);
  return o(out.transpose(1, 2).reshape({batch, length, -1}));
}

}  // namespace omni::models::wan
