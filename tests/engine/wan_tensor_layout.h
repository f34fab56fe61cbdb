// The checkpoint layout (tensor name → shape) of the Wan2.x components, derived
// from the architecture without building a module, so that tests can describe
// a 14B-parameter checkpoint without allocating it. inspect_test checks each
// list against the named parameters of a small instantiated model (same names,
// same shapes) and its total against the models' parameter_count.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "omni/models/wan/autoencoder_kl_wan.h"
#include "omni/models/wan/umt5_config.h"
#include "omni/models/wan/wan_transformer_config.h"

namespace omni::testing {

using Shape = std::vector<std::int64_t>;
using TensorLayout = std::vector<std::pair<std::string, Shape>>;

inline std::uint64_t layout_numel(const TensorLayout& layout) {
  std::uint64_t n = 0;
  for (const auto& [name, shape] : layout) {
    std::uint64_t e = 1;
    for (auto d : shape) e *= static_cast<std::uint64_t>(d);
    n += e;
  }
  return n;
}

namespace detail_layout {
inline void linear(TensorLayout& out, const std::string& p, std::int64_t in, std::int64_t o,
                   bool bias = true) {
  out.push_back({p + ".weight", {o, in}});
  if (bias) out.push_back({p + ".bias", {o}});
}
}  // namespace detail_layout

// diffusers WanTransformer3DModel (text-to-video), in registration order.
inline TensorLayout wan_transformer_layout(const models::wan::WanTransformer3DConfig& c) {
  using detail_layout::linear;
  const auto d = c.inner_dim();
  const auto& p = c.patch_size;
  TensorLayout out;
  out.push_back({"patch_embedding.weight", {d, c.in_channels, p[0], p[1], p[2]}});
  out.push_back({"patch_embedding.bias", {d}});
  linear(out, "condition_embedder.time_embedder.linear_1", c.freq_dim, d);
  linear(out, "condition_embedder.time_embedder.linear_2", d, d);
  linear(out, "condition_embedder.time_proj", d, 6 * d);
  linear(out, "condition_embedder.text_embedder.linear_1", c.text_dim, d);
  linear(out, "condition_embedder.text_embedder.linear_2", d, d);
  for (std::int64_t i = 0; i < c.num_layers; ++i) {
    const auto b = "blocks." + std::to_string(i) + ".";
    for (const char* attn : {"attn1", "attn2"}) {
      const auto a = b + attn + ".";
      linear(out, a + "to_q", d, d);
      linear(out, a + "to_k", d, d);
      linear(out, a + "to_v", d, d);
      linear(out, a + "to_out.0", d, d);
      out.push_back({a + "norm_q.weight", {d}});
      out.push_back({a + "norm_k.weight", {d}});
    }
    if (c.cross_attn_norm) {
      out.push_back({b + "norm2.weight", {d}});
      out.push_back({b + "norm2.bias", {d}});
    }
    linear(out, b + "ffn.net.0.proj", d, c.ffn_dim);
    linear(out, b + "ffn.net.2", c.ffn_dim, d);
    out.push_back({b + "scale_shift_table", {1, 6, d}});
  }
  linear(out, "proj_out", d, c.out_channels * c.patch_volume());
  out.push_back({"scale_shift_table", {1, 2, d}});
  return out;
}

// transformers UMT5EncoderModel as saved by save_pretrained: the tied
// `encoder.embed_tokens.weight` is stored once, as `shared.weight`.
inline TensorLayout umt5_encoder_layout(const models::wan::UMT5Config& c) {
  using detail_layout::linear;
  const auto inner = c.inner_dim();
  TensorLayout out;
  out.push_back({"shared.weight", {c.vocab_size, c.d_model}});
  for (std::int64_t i = 0; i < c.num_layers; ++i) {
    const auto b = "encoder.block." + std::to_string(i) + ".layer.";
    const auto a = b + "0.SelfAttention.";
    linear(out, a + "q", c.d_model, inner, false);
    linear(out, a + "k", c.d_model, inner, false);
    linear(out, a + "v", c.d_model, inner, false);
    linear(out, a + "o", inner, c.d_model, false);
    out.push_back(
        {a + "relative_attention_bias.weight", {c.relative_attention_num_buckets, c.num_heads}});
    out.push_back({b + "0.layer_norm.weight", {c.d_model}});
    const auto f = b + "1.DenseReluDense.";
    if (c.is_gated_act) {
      linear(out, f + "wi_0", c.d_model, c.d_ff, false);
      linear(out, f + "wi_1", c.d_model, c.d_ff, false);
    } else {
      linear(out, f + "wi", c.d_model, c.d_ff, false);
    }
    linear(out, f + "wo", c.d_ff, c.d_model, false);
    out.push_back({b + "1.layer_norm.weight", {c.d_model}});
  }
  out.push_back({"encoder.final_layer_norm.weight", {c.d_model}});
  return out;
}

// diffusers AutoencoderKLWan (Wan2.1 layout: not residual, no attn_scales).
inline TensorLayout autoencoder_kl_wan_layout(const models::wan::AutoencoderKLWanConfig& c) {
  TensorLayout out;
  auto conv3d = [&](const std::string& p, std::int64_t in, std::int64_t o, std::int64_t kt,
                    std::int64_t ks) {
    out.push_back({p + ".weight", {o, in, kt, ks, ks}});
    out.push_back({p + ".bias", {o}});
  };
  auto conv2d = [&](const std::string& p, std::int64_t in, std::int64_t o, std::int64_t k) {
    out.push_back({p + ".weight", {o, in, k, k}});
    out.push_back({p + ".bias", {o}});
  };
  auto rms = [&](const std::string& p, std::int64_t dim, bool images) {
    out.push_back({p + ".gamma", images ? Shape{dim, 1, 1} : Shape{dim, 1, 1, 1}});
  };
  auto residual = [&](const std::string& p, std::int64_t in, std::int64_t o) {
    rms(p + ".norm1", in, false);
    conv3d(p + ".conv1", in, o, 3, 3);
    rms(p + ".norm2", o, false);
    conv3d(p + ".conv2", o, o, 3, 3);
    if (in != o) conv3d(p + ".conv_shortcut", in, o, 1, 1);
  };
  auto mid = [&](const std::string& p, std::int64_t dim) {
    residual(p + ".resnets.0", dim, dim);
    rms(p + ".attentions.0.norm", dim, true);
    conv2d(p + ".attentions.0.to_qkv", dim, 3 * dim, 1);
    conv2d(p + ".attentions.0.proj", dim, dim, 1);
    residual(p + ".resnets.1", dim, dim);
  };
  const auto levels = c.dim_mult.size();
  const auto z = c.z_dim;

  // Encoder: one flat down_blocks list of residual blocks and resamplers.
  std::int64_t dim = c.base_dim;
  conv3d("encoder.conv_in", c.in_channels, dim, 3, 3);
  int k = 0;
  for (std::size_t i = 0; i < levels; ++i) {
    const std::int64_t o = c.base_dim * c.dim_mult[i];
    for (std::int64_t r = 0; r < c.num_res_blocks; ++r) {
      residual("encoder.down_blocks." + std::to_string(k++), dim, o);
      dim = o;
    }
    if (i != levels - 1) {
      const auto p = "encoder.down_blocks." + std::to_string(k++);
      conv2d(p + ".resample.1", dim, dim, 3);
      if (c.temperal_downsample[i]) {
        out.push_back({p + ".time_conv.weight", {dim, dim, 3, 1, 1}});
        out.push_back({p + ".time_conv.bias", {dim}});
      }
    }
  }
  mid("encoder.mid_block", dim);
  rms("encoder.norm_out", dim, false);
  conv3d("encoder.conv_out", dim, 2 * z, 3, 3);
  conv3d("quant_conv", 2 * z, 2 * z, 1, 1);
  conv3d("post_quant_conv", z, z, 1, 1);

  // Decoder: up_blocks.i.{resnets, upsamplers.0}.
  const auto base = c.decoder_dim();
  const auto upsample = c.temperal_upsample();
  dim = base * c.dim_mult.back();
  conv3d("decoder.conv_in", z, dim, 3, 3);
  mid("decoder.mid_block", dim);
  for (std::size_t i = 0; i < levels; ++i) {
    const auto p = "decoder.up_blocks." + std::to_string(i);
    const std::int64_t in = i == 0 ? dim : dim / 2;
    const std::int64_t o = base * c.dim_mult[levels - 1 - i];
    for (std::int64_t r = 0; r <= c.num_res_blocks; ++r)
      residual(p + ".resnets." + std::to_string(r), r == 0 ? in : o, o);
    if (i != levels - 1) {
      conv2d(p + ".upsamplers.0.resample.1", o, o / 2, 3);
      if (upsample[i]) {
        out.push_back({p + ".upsamplers.0.time_conv.weight", {2 * o, o, 3, 1, 1}});
        out.push_back({p + ".upsamplers.0.time_conv.bias", {2 * o}});
      }
    }
    dim = o;
  }
  rms("decoder.norm_out", dim, false);
  conv3d("decoder.conv_out", dim, c.out_channels, 3, 3);
  return out;
}

}  // namespace omni::testing
