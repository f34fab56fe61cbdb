// Shared layers used by several model families: RMSNorm, a LayerNorm that
// computes in float32, and scaled dot-product attention.
//
// Note [Upcast, never downcast]
// The reference Python code calls `.float()` around norms and softmax so that
// bf16/fp16 runs accumulate in float32. Taken literally, `.float()` also
// rounds a float64 run down to float32. These layers upcast half types to
// float32 and leave float32 and float64 as they are, so a float64 run stays
// float64 end to end (the fixtures' float64 keys are within ~3e-7 of this).
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <optional>

#include "omni/nn/module.h"

namespace omni::nn {

// The dtype a computation on `type` runs in: float32 for half types, else `type`.
torch::ScalarType upcast_type(torch::ScalarType type);
// `x` converted to upcast_type(x.scalar_type()); no copy when already there.
torch::Tensor upcast(const torch::Tensor& x);

// torch.finfo(type).min: the additive value that masks an attention key out
// (finite, so a row whose keys are all masked stays finite). InvalidRequest
// for a type that is not float64/32/16 or bfloat16.
double lowest_value(torch::ScalarType type);

// torch.nn.RMSNorm over the last dimension: x·rsqrt(mean(x²) + eps), rounded
// back to x's dtype, then times `weight` (when affine). Parameter: `weight`.
class RMSNormImpl : public Module {
 public:
  RMSNormImpl(std::int64_t dim, double eps, bool elementwise_affine = true);
  torch::Tensor forward(const torch::Tensor& x);

  torch::Tensor weight;  // undefined when not affine

 private:
  double eps_;
};
OMNI_MODULE(RMSNorm);

// diffusers' FP32LayerNorm: layer_norm over the last dimension computed in
// upcast_type (Note [Upcast, never downcast]), returned in the input's dtype.
// Parameters `weight` and `bias` when elementwise_affine.
class FP32LayerNormImpl : public Module {
 public:
  FP32LayerNormImpl(std::int64_t dim, double eps, bool elementwise_affine);
  torch::Tensor forward(const torch::Tensor& x);

  torch::Tensor weight;  // undefined when not affine
  torch::Tensor bias;

 private:
  std::int64_t dim_;
  double eps_;
};
OMNI_MODULE(FP32LayerNorm);

// softmax(q·kᵀ·scale + mask)·v for q [B, H, Sq, D], k and v [B, H, Sk, D].
// `additive_mask` broadcasts to [B, H, Sq, Sk] and is added to the scores;
// `scale` defaults to 1/sqrt(D). The softmax runs in upcast_type; the result
// has q's dtype. With LibTorch ≥ 2.0 (and when the scale is the default or
// LibTorch ≥ 2.1) this is torch's fused scaled_dot_product_attention;
// otherwise it is eager_attention, whose score matrix stays bounded
// (kMaxAttentionScoreElements) instead of growing as Sq·Sk.
torch::Tensor scaled_dot_product_attention(const torch::Tensor& q, const torch::Tensor& k,
                                           const torch::Tensor& v,
                                           const std::optional<torch::Tensor>& additive_mask = {},
                                           std::optional<double> scale = {});

// Largest score matrix eager_attention materialises at once, in elements.
inline constexpr std::int64_t kMaxAttentionScoreElements = std::int64_t{1} << 28;

// The same computation, always through the explicit softmax path (no fused
// kernel), in query chunks of at most `max_score_elements` scores. Used where
// parity with an eager reference matters more than speed.
torch::Tensor eager_attention(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v,
                              const std::optional<torch::Tensor>& additive_mask, double scale,
                              std::int64_t max_score_elements = kMaxAttentionScoreElements);

}  // namespace omni::nn
