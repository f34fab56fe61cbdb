// WanAttention with WanAttnProcessor's math (text-to-video: no added k/v).
#include <torch/torch.h>

#include "omni/models/wan/wan_transformer_layers.h"

namespace omni::models::wan {

WanAttentionImpl::WanAttentionImpl(std::int64_t dim, std::int64_t heads, std::int64_t head_dim,
                                   double eps)
    : heads_(heads) {
  const auto inner = heads * head_dim;
  to_q = register_module("to_q", torch::nn::Linear(dim, inner));
  to_k = register_module("to_k", torch::nn::Linear(dim, inner));
  to_v = register_module("to_v", torch::nn::Linear(dim, inner));
  out_proj_ = torch::nn::Linear(inner, dim);
  to_out = register_module("to_out", torch::nn::ModuleList(out_proj_));
  norm_q = register_module("norm_q", omni::nn::RMSNorm(inner, eps));
  norm_k = register_module("norm_k", omni::nn::RMSNorm(inner, eps));
}

torch::Tensor WanAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& context,
                                        const std::optional<RotaryEmbedding>& rope) {
  const auto& source = context.defined() ? context : x;
  const auto batch = x.size(0);
  // RMSNorm runs over all heads together ("rms_norm_across_heads"), before the split.
  auto q = norm_q(to_q(x)).reshape({batch, x.size(1), heads_, -1});
  auto k = norm_k(to_k(source)).reshape({batch, source.size(1), heads_, -1});
  auto v = to_v(source).reshape({batch, source.size(1), heads_, -1});
  if (rope) {
    q = apply_rotary_embedding(q, *rope);
    k = apply_rotary_embedding(k, *rope);
  }
  auto out = omni::nn::scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                                    v.transpose(1, 2));
  out = out.transpose(1, 2).reshape({batch, x.size(1), -1}).to(q.scalar_type());
  return out_proj_(out);
}

}  // namespace omni::models::wan
