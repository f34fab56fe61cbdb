#include "omni/nn/layers.h"

#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "omni/cancel_point.h"
#include "omni/error.h"

namespace omni::nn {

torch::ScalarType upcast_type(torch::ScalarType type) {
  return (type == torch::kHalf || type == torch::kBFloat16) ? torch::kFloat : type;
}

torch::Tensor upcast(const torch::Tensor& x) {
  return x.to(upcast_type(x.scalar_type()));
}

double lowest_value(torch::ScalarType type) {
  if (type == torch::kDouble) return std::numeric_limits<double>::lowest();
  if (type == torch::kFloat) return std::numeric_limits<float>::lowest();
  if (type == torch::kBFloat16)
    return static_cast<double>(std::numeric_limits<c10::BFloat16>::lowest());
  if (type == torch::kHalf) return static_cast<double>(std::numeric_limits<c10::Half>::lowest());
  throw InvalidRequest(omni::detail::concat("attention masks: weights of dtype ", type,
                                            " are not supported (float64/32/16, bfloat16)"));
}

RMSNormImpl::RMSNormImpl(std::int64_t dim, double eps, bool elementwise_affine) : eps_(eps) {
  if (elementwise_affine) weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  // Same order as torch's rms_norm: normalise in the upcast type, round back
  // to the input's dtype, then scale.
  const auto xf = upcast(x);
  auto out = (xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps_)).to(x.scalar_type());
  if (weight.defined()) out = (out * weight).to(x.scalar_type());
  return out;
}

FP32LayerNormImpl::FP32LayerNormImpl(std::int64_t dim, double eps, bool elementwise_affine)
    : dim_(dim), eps_(eps) {
  if (elementwise_affine) {
    weight = register_parameter("weight", torch::ones({dim}));
    bias = register_parameter("bias", torch::zeros({dim}));
  }
}

torch::Tensor FP32LayerNormImpl::forward(const torch::Tensor& x) {
  const auto xf = upcast(x);
  c10::optional<torch::Tensor> w, b;
  if (weight.defined()) {
    w = weight.to(xf.scalar_type());
    b = bias.to(xf.scalar_type());
  }
  return torch::layer_norm(xf, {dim_}, w, b, eps_).to(x.scalar_type());
}

namespace {

void check_attention_shapes(const torch::Tensor& q, const torch::Tensor& k,
                            const torch::Tensor& v) {
  OMNI_INTERNAL_ASSERT(q.dim() == 4 && k.dim() == 4 && v.dim() == 4,
                       "attention expects [B, H, S, D] tensors");
  OMNI_INTERNAL_ASSERT(q.size(-1) == k.size(-1) && k.size(-2) == v.size(-2),
                       "attention: q/k head dims or k/v lengths differ");
}

}  // namespace

torch::Tensor eager_attention(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v,
                              const std::optional<torch::Tensor>& additive_mask, double scale,
                              std::int64_t max_score_elements) {
  check_attention_shapes(q, k, v);
  const auto batch_heads = std::max<std::int64_t>(1, q.size(0) * q.size(1));
  const auto sq = q.size(-2);
  const auto sk = k.size(-2);
  const auto rows =
      std::clamp<std::int64_t>(max_score_elements / (batch_heads * std::max<std::int64_t>(sk, 1)),
                               1, std::max<std::int64_t>(sq, 1));
  const auto kt = k.transpose(-2, -1);
  std::optional<torch::Tensor> mask;
  if (additive_mask) mask = additive_mask->to(q.scalar_type());

  auto run = [&](const torch::Tensor& qc, std::int64_t start, std::int64_t n) {
    auto scores = torch::matmul(qc, kt) * scale;
    if (mask) {
      const auto& m = *mask;
      const bool per_row = m.dim() >= 2 && m.size(-2) != 1;
      scores = scores + (per_row ? m.narrow(-2, start, n) : m);
    }
    const auto probs = torch::softmax(upcast(scores), -1).to(v.scalar_type());
    return torch::matmul(probs, v);
  };

  if (rows >= sq) return run(q, 0, sq).to(q.scalar_type());
  auto sizes = q.sizes().vec();
  sizes.back() = v.size(-1);
  auto out = torch::empty(sizes, q.options().dtype(v.scalar_type()));
  for (std::int64_t start = 0; start < sq; start += rows) {
    cancel_point();  // Note [Cancel points inside a step]
    const auto n = std::min(rows, sq - start);
    out.narrow(-2, start, n).copy_(run(q.narrow(-2, start, n), start, n));
  }
  return out.to(q.scalar_type());
}

torch::Tensor scaled_dot_product_attention(const torch::Tensor& q, const torch::Tensor& k,
                                           const torch::Tensor& v,
                                           const std::optional<torch::Tensor>& additive_mask,
                                           std::optional<double> scale) {
  check_attention_shapes(q, k, v);
#if TORCH_VERSION_MAJOR >= 2
  c10::optional<torch::Tensor> mask;
  if (additive_mask) mask = additive_mask->to(q.scalar_type());
#if TORCH_VERSION_MAJOR > 2 || TORCH_VERSION_MINOR >= 1
  c10::optional<double> fused_scale;
  if (scale) fused_scale = *scale;
  return at::scaled_dot_product_attention(q, k, v, mask, 0.0, false, fused_scale);
#else
  if (!scale) return at::scaled_dot_product_attention(q, k, v, mask, 0.0, false);
#endif
#endif
  const double s = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  return eager_attention(q, k, v, additive_mask, s);
}

}  // namespace omni::nn
