// The parts of WanTransformer3DModel, named as in diffusers'
// models/transformers/transformer_wan.py so that their parameters carry the
// checkpoint's keys (`attn1.to_q.weight`, `ffn.net.0.proj.weight`, …).
//
// Every part is an omni::nn::Module; WanTransformerBlock in particular can
// carry forward pre-hooks (block-wise offload attaches there).
//
// Dtypes: each layer computes in its weights' dtype; modulation, the adaptive
// norms and the residual adds run in at least float32 as in diffusers (see
// Note [Upcast, never downcast] in omni/nn/layers.h).
#pragma once

#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include <array>
#include <cstdint>
#include <optional>

#include "omni/nn/layers.h"
#include "omni/nn/module.h"

namespace omni::models::wan {

// Rotary tables for one token grid, already de-interleaved: cos and sin of
// shape [1, tokens, 1, head_dim / 2], tokens in (frame, height, width) order.
struct RotaryEmbedding {
  torch::Tensor cos;
  torch::Tensor sin;
};

// Rotates consecutive channel pairs (x[2i], x[2i+1]) of x [B, S, H, head_dim]
// by the angles in `rope`; the result has x's dtype.
torch::Tensor apply_rotary_embedding(const torch::Tensor& x, const RotaryEmbedding& rope);

// diffusers' get_timestep_embedding(t, dim, flip_sin_to_cos=True,
// downscale_freq_shift=0): [N] → [N, dim] float32 (cos half first), whatever
// t's dtype. Always float32, as in the reference.
torch::Tensor sinusoidal_timestep_embedding(const torch::Tensor& timesteps, std::int64_t dim);

// WanRotaryPosEmbed: 3-D RoPE split t/h/w = head_dim − 4⌊head_dim/6⌋, 2⌊head_dim/6⌋,
// 2⌊head_dim/6⌋. Buffers `freqs_cos`, `freqs_sin` [max_seq_len, head_dim] are
// non-persistent (computed, never in a checkpoint).
class WanRotaryPosEmbedImpl : public omni::nn::Module {
 public:
  WanRotaryPosEmbedImpl(std::int64_t attention_head_dim, std::array<std::int64_t, 3> patch_size,
                        std::int64_t max_seq_len, double theta = 10000.0);
  // Tables for a latent of shape [B, C, F, H, W]. InvalidRequest when the patch
  // grid is longer than max_seq_len along an axis.
  RotaryEmbedding forward(c10::IntArrayRef latent_shape);

  torch::Tensor freqs_cos;
  torch::Tensor freqs_sin;

 private:
  std::array<std::int64_t, 3> split_;
  std::array<std::int64_t, 3> patch_size_;
  std::int64_t max_seq_len_;
};
OMNI_MODULE(WanRotaryPosEmbed);

// WanAttention (self- or cross-attention) with WanAttnProcessor's math:
// q/k/v projections, RMSNorm across all heads on q and k, optional RoPE,
// softmax(q·kᵀ/√d)·v, output projection `to_out.0`.
class WanAttentionImpl : public omni::nn::Module {
 public:
  WanAttentionImpl(std::int64_t dim, std::int64_t heads, std::int64_t head_dim, double eps);
  // `context` undefined → self-attention on `x` [B, S, dim].
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& context,
                        const std::optional<RotaryEmbedding>& rope);

  torch::nn::Linear to_q{nullptr}, to_k{nullptr}, to_v{nullptr};
  torch::nn::ModuleList to_out{nullptr};  // [0] = the output Linear
  omni::nn::RMSNorm norm_q{nullptr}, norm_k{nullptr};

 private:
  torch::nn::Linear out_proj_{nullptr};  // the same module as to_out[0]
  std::int64_t heads_;
};
OMNI_MODULE(WanAttention);

// diffusers' GELU activation module: `proj` Linear followed by gelu(tanh).
class WanGeluProjectionImpl : public omni::nn::Module {
 public:
  WanGeluProjectionImpl(std::int64_t dim_in, std::int64_t dim_out);
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::Linear proj{nullptr};
};
OMNI_MODULE(WanGeluProjection);

// diffusers' FeedForward(dim, inner_dim=ffn_dim, activation_fn="gelu-approximate"):
// `net.0.proj` → gelu(tanh) → (dropout, `net.1`) → `net.2`.
class WanFeedForwardImpl : public omni::nn::Module {
 public:
  WanFeedForwardImpl(std::int64_t dim, std::int64_t inner_dim);
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::ModuleList net{nullptr};

 private:
  WanGeluProjection act_{nullptr};
  torch::nn::Linear out_{nullptr};
};
OMNI_MODULE(WanFeedForward);

// diffusers' TimestepEmbedding(in, dim): linear_1 → SiLU → linear_2.
class WanTimestepEmbeddingImpl : public omni::nn::Module {
 public:
  WanTimestepEmbeddingImpl(std::int64_t in_channels, std::int64_t dim);
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::Linear linear_1{nullptr}, linear_2{nullptr};
};
OMNI_MODULE(WanTimestepEmbedding);

// diffusers' PixArtAlphaTextProjection(in, dim, act_fn="gelu_tanh").
class WanTextProjectionImpl : public omni::nn::Module {
 public:
  WanTextProjectionImpl(std::int64_t in_features, std::int64_t dim);
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::Linear linear_1{nullptr}, linear_2{nullptr};
};
OMNI_MODULE(WanTextProjection);

// The three outputs of the condition embedder.
struct WanConditions {
  torch::Tensor temb;           // [B, dim] or [B, S, dim] (per-token timesteps)
  torch::Tensor timestep_proj;  // [B, 6·dim] or [B, S, 6·dim]
  torch::Tensor context;        // projected text [B, L, dim]
};

// WanTimeTextImageEmbedding without the image branch: sinusoidal features →
// `time_embedder` → SiLU → `time_proj` (6·dim modulation), and
// `text_embedder` for the text.
class WanTimeTextEmbeddingImpl : public omni::nn::Module {
 public:
  WanTimeTextEmbeddingImpl(std::int64_t dim, std::int64_t freq_dim, std::int64_t text_dim);
  // `timestep` flat [N]; with `tokens_per_item` set, N = B·tokens_per_item and
  // the time outputs get shape [B, tokens_per_item, …]. `text` must already be
  // in the text_embedder's dtype.
  WanConditions forward(const torch::Tensor& timestep, const torch::Tensor& text,
                        std::optional<std::int64_t> tokens_per_item);

  WanTimestepEmbedding time_embedder{nullptr};
  torch::nn::Linear time_proj{nullptr};
  WanTextProjection text_embedder{nullptr};

 private:
  std::int64_t freq_dim_;
};
OMNI_MODULE(WanTimeTextEmbedding);

// WanTransformerBlock: adaptive-norm self-attention with RoPE, (normed)
// cross-attention to the text, adaptive-norm feed-forward. Modulation from
// `scale_shift_table` [1, 6, dim] + the timestep projection, in the order
// shift, scale, gate (attention), shift, scale, gate (feed-forward).
class WanTransformerBlockImpl : public omni::nn::Module {
 public:
  WanTransformerBlockImpl(std::int64_t dim, std::int64_t ffn_dim, std::int64_t heads, double eps,
                          bool cross_attn_norm);
  // x [B, S, dim]; context [B, L, dim]; timestep_proj [B, 6, dim] or
  // [B, S, 6, dim]; rope for the S tokens.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& context,
                        const torch::Tensor& timestep_proj, const RotaryEmbedding& rope);

  omni::nn::FP32LayerNorm norm1{nullptr};
  WanAttention attn1{nullptr};
  WanAttention attn2{nullptr};
  omni::nn::FP32LayerNorm norm2{nullptr};  // null when cross_attn_norm is false
  WanFeedForward ffn{nullptr};
  omni::nn::FP32LayerNorm norm3{nullptr};
  torch::Tensor scale_shift_table;
};
OMNI_MODULE(WanTransformerBlock);

}  // namespace omni::models::wan
