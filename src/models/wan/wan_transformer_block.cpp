// WanTransformerBlock.
#include <torch/torch.h>

#include <vector>

#include "omni/models/wan/wan_transformer_layers.h"

namespace omni::models::wan {

using omni::nn::upcast;

WanTransformerBlockImpl::WanTransformerBlockImpl(std::int64_t dim, std::int64_t ffn_dim,
                                                 std::int64_t heads, double eps,
                                                 bool cross_attn_norm) {
  norm1 = register_module("norm1", omni::nn::FP32LayerNorm(dim, eps, false));
  attn1 = register_module("attn1", WanAttention(dim, heads, dim / heads, eps));
  attn2 = register_module("attn2", WanAttention(dim, heads, dim / heads, eps));
  if (cross_attn_norm) norm2 = register_module("norm2", omni::nn::FP32LayerNorm(dim, eps, true));
  ffn = register_module("ffn", WanFeedForward(dim, ffn_dim));
  norm3 = register_module("norm3", omni::nn::FP32LayerNorm(dim, eps, false));
  scale_shift_table = register_parameter(
      "scale_shift_table", torch::randn({1, 6, dim}) / std::sqrt(static_cast<double>(dim)));
}

torch::Tensor WanTransformerBlockImpl::forward(const torch::Tensor& x, const torch::Tensor& context,
                                               const torch::Tensor& timestep_proj,
                                               const RotaryEmbedding& rope) {
  const auto dtype = x.scalar_type();
  // Six modulation vectors, each broadcastable to x [B, S, dim]:
  // [B, 1, dim] for one timestep per item, [B, S, dim] for one per token.
  std::vector<torch::Tensor> mod;
  if (timestep_proj.dim() == 4) {
    mod = (scale_shift_table.unsqueeze(0) + upcast(timestep_proj)).chunk(6, 2);
    for (auto& m : mod) m = m.squeeze(2);
  } else {
    mod = (scale_shift_table + upcast(timestep_proj)).chunk(6, 1);
  }
  const auto& shift_msa = mod[0];
  const auto& scale_msa = mod[1];
  const auto& gate_msa = mod[2];
  const auto& c_shift_msa = mod[3];
  const auto& c_scale_msa = mod[4];
  const auto& c_gate_msa = mod[5];

  // 1. Self-attention with RoPE.
  auto h = (norm1(upcast(x)) * (1 + scale_msa) + shift_msa).to(dtype);
  auto attn = attn1(h, torch::Tensor(), rope);
  auto out = (upcast(x) + attn * gate_msa).to(dtype);

  // 2. Cross-attention to the text.
  h = norm2 ? norm2(upcast(out)).to(dtype) : out;
  out = out + attn2(h, context, std::nullopt);

  // 3. Feed-forward.
  h = (norm3(upcast(out)) * (1 + c_scale_msa) + c_shift_msa).to(dtype);
  const auto ff = ffn(h);
  return (upcast(out) + upcast(ff) * c_gate_msa).to(dtype);
}

}  // namespace omni::models::wan
