// WanTimeTextImageEmbedding (text-to-video part) and the two MLPs it is made of:
// diffusers' TimestepEmbedding and PixArtAlphaTextProjection.
#include <torch/torch.h>

#include <cmath>

#include "omni/models/wan/wan_transformer_layers.h"

namespace omni::models::wan {

torch::Tensor sinusoidal_timestep_embedding(const torch::Tensor& timesteps, std::int64_t dim) {
  // Same operation order as diffusers' get_timestep_embedding so that the
  // float32 rounding matches: exp(-ln(10000)·i / half) · t, then [cos, sin].
  const std::int64_t half = dim / 2;
  auto exponent =
      torch::arange(0, half, timesteps.options().dtype(torch::kFloat)) * (-std::log(10000.0));
  exponent = exponent / half;
  const auto angles = timesteps.to(torch::kFloat).unsqueeze(1) * torch::exp(exponent).unsqueeze(0);
  auto emb = torch::cat({torch::cos(angles), torch::sin(angles)}, -1);
  if (dim % 2 == 1) emb = torch::constant_pad_nd(emb, {0, 1});
  return emb;
}

WanTimestepEmbeddingImpl::WanTimestepEmbeddingImpl(std::int64_t in_channels, std::int64_t dim) {
  linear_1 = register_module("linear_1", torch::nn::Linear(in_channels, dim));
  linear_2 = register_module("linear_2", torch::nn::Linear(dim, dim));
}

torch::Tensor WanTimestepEmbeddingImpl::forward(const torch::Tensor& x) {
  return linear_2(torch::silu(linear_1(x)));
}

WanTextProjectionImpl::WanTextProjectionImpl(std::int64_t in_features, std::int64_t dim) {
  linear_1 = register_module("linear_1", torch::nn::Linear(in_features, dim));
  linear_2 = register_module("linear_2", torch::nn::Linear(dim, dim));
}

torch::Tensor WanTextProjectionImpl::forward(const torch::Tensor& x) {
  return linear_2(torch::gelu(linear_1(x), "tanh"));
}

WanTimeTextEmbeddingImpl::WanTimeTextEmbeddingImpl(std::int64_t dim, std::int64_t freq_dim,
                                                   std::int64_t text_dim)
    : freq_dim_(freq_dim) {
  time_embedder = register_module("time_embedder", WanTimestepEmbedding(freq_dim, dim));
  time_proj = register_module("time_proj", torch::nn::Linear(dim, 6 * dim));
  text_embedder = register_module("text_embedder", WanTextProjection(text_dim, dim));
}

WanConditions WanTimeTextEmbeddingImpl::forward(const torch::Tensor& timestep,
                                                const torch::Tensor& text,
                                                std::optional<std::int64_t> tokens_per_item) {
  auto features = sinusoidal_timestep_embedding(timestep, freq_dim_);
  if (tokens_per_item) features = features.reshape({-1, *tokens_per_item, freq_dim_});
  features = features.to(time_embedder->linear_1->weight.scalar_type());
  // As in diffusers: temb takes the text's dtype, the modulation comes from SiLU(temb).
  auto temb = time_embedder(features).to(text.scalar_type());
  auto timestep_proj = time_proj(torch::silu(temb).to(time_proj->weight.scalar_type()));
  return {temb, timestep_proj, text_embedder(text)};
}

}  // namespace omni::models::wan
