// The parts of transformers' UMT5 encoder (models/umt5/modeling_umt5.py),
// named as there so that parameters carry the checkpoint keys
// (`layer.0.SelfAttention.q.weight`, `layer.1.DenseReluDense.wi_0.weight`, …).
// UMT5Block is an omni::nn::Module and can carry forward pre-hooks.
#pragma once

#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>

#include <cstdint>

#include "omni/models/wan/umt5_config.h"
#include "omni/nn/module.h"

namespace omni::models::wan {

// T5 relative-position buckets for an encoder (bidirectional: half of the
// buckets per direction, half of those exact, the rest logarithmic up to
// max_distance): int64 [query_length, key_length], bucket of (key − query).
torch::Tensor umt5_relative_position_buckets(std::int64_t query_length, std::int64_t key_length,
                                             std::int64_t num_buckets, std::int64_t max_distance,
                                             const torch::Device& device);

// UMT5LayerNorm (T5's RMS norm, no mean, no bias): x·rsqrt(mean(x²) + eps),
// the mean taken in at least float32, rounded to a half weight's dtype, times
// `weight`.
class UMT5LayerNormImpl : public omni::nn::Module {
 public:
  UMT5LayerNormImpl(std::int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;

 private:
  double eps_;
};
OMNI_MODULE(UMT5LayerNorm);

// UMT5Attention (encoder self-attention): q/k/v/o without bias, no 1/√d_kv
// scaling, and its own `relative_attention_bias` table [buckets, heads].
class UMT5AttentionImpl : public omni::nn::Module {
 public:
  explicit UMT5AttentionImpl(const UMT5Config& config);
  // x [B, L, d_model]; additive_mask [B, 1, 1, L] (undefined: none); buckets
  // from umt5_relative_position_buckets(L, L, …) on x's device.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& additive_mask,
                        const torch::Tensor& buckets);

  torch::nn::Linear q{nullptr}, k{nullptr}, v{nullptr}, o{nullptr};
  torch::nn::Embedding relative_attention_bias{nullptr};

 private:
  std::int64_t heads_;
  std::int64_t d_kv_;
};
OMNI_MODULE(UMT5Attention);

// UMT5DenseGatedActDense (`wi_0`, `wi_1`, `wo`) or, when the config is not
// gated, UMT5DenseActDense (`wi`, `wo`).
class UMT5DenseActDenseImpl : public omni::nn::Module {
 public:
  explicit UMT5DenseActDenseImpl(const UMT5Config& config);
  torch::Tensor forward(const torch::Tensor& x);

  torch::nn::Linear wi{nullptr};                   // non-gated only
  torch::nn::Linear wi_0{nullptr}, wi_1{nullptr};  // gated only
  torch::nn::Linear wo{nullptr};

 private:
  UMT5Activation act_;
};
OMNI_MODULE(UMT5DenseActDense);

// UMT5LayerSelfAttention: x + SelfAttention(layer_norm(x)).
class UMT5LayerSelfAttentionImpl : public omni::nn::Module {
 public:
  explicit UMT5LayerSelfAttentionImpl(const UMT5Config& config);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& additive_mask,
                        const torch::Tensor& buckets);
  UMT5Attention SelfAttention{nullptr};
  UMT5LayerNorm layer_norm{nullptr};
};
OMNI_MODULE(UMT5LayerSelfAttention);

// UMT5LayerFF: x + DenseReluDense(layer_norm(x)).
class UMT5LayerFFImpl : public omni::nn::Module {
 public:
  explicit UMT5LayerFFImpl(const UMT5Config& config);
  torch::Tensor forward(const torch::Tensor& x);
  UMT5DenseActDense DenseReluDense{nullptr};
  UMT5LayerNorm layer_norm{nullptr};
};
OMNI_MODULE(UMT5LayerFF);

// UMT5Block of the encoder: `layer.0` self-attention, `layer.1` feed-forward
// (float16 activations are clamped below infinity as in transformers).
class UMT5BlockImpl : public omni::nn::Module {
 public:
  explicit UMT5BlockImpl(const UMT5Config& config);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& additive_mask,
                        const torch::Tensor& buckets);
  torch::nn::ModuleList layer{nullptr};

 private:
  UMT5LayerSelfAttention self_attention_{nullptr};
  UMT5LayerFF feed_forward_{nullptr};
};
OMNI_MODULE(UMT5Block);

}  // namespace omni::models::wan
