// UMT5LayerNorm.
#include <torch/torch.h>

#include "omni/models/wan/umt5_layers.h"
#include "omni/nn/layers.h"

namespace omni::models::wan {

UMT5LayerNormImpl::UMT5LayerNormImpl(std::int64_t dim, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor UMT5LayerNormImpl::forward(const torch::Tensor& x) {
  // The mean of squares accumulates in at least float32 (Note [Upcast, never
  // downcast]); the product follows type promotion, then half weights set the
  // output dtype, as in transformers.
  const auto variance = omni::nn::upcast(x).pow(2).mean(-1, /*keepdim=*/true);
  auto h = x * torch::rsqrt(variance + eps_);
  const auto wtype = weight.scalar_type();
  if (wtype == torch::kHalf || wtype == torch::kBFloat16) h = h.to(wtype);
  return weight * h;
}

}  // namespace omni::models::wan
