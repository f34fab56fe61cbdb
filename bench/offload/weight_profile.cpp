#include "bench/offload/weight_profile.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "omni/error.h"

namespace omni::bench {

std::int64_t TensorShape::numel() const {
  return std::accumulate(sizes.begin(), sizes.end(), std::int64_t{1},
                         std::multiplies<std::int64_t>());
}

std::int64_t ComponentShapes::parameters() const {
  std::int64_t n = 0;
  for (const auto& t : tensors) n += t.numel();
  return n;
}

std::uint64_t ComponentShapes::bytes(torch::ScalarType dtype) const {
  return static_cast<std::uint64_t>(parameters()) * c10::elementSize(dtype);
}

std::uint64_t ComponentShapes::largest_tensor_bytes(torch::ScalarType dtype) const {
  std::int64_t largest = 0;
  for (const auto& t : tensors) largest = std::max(largest, t.numel());
  return static_cast<std::uint64_t>(largest) * c10::elementSize(dtype);
}

Scale Scale::parse(std::string_view text) {
  const std::string s(text);
  double value = 0;
  try {
    std::size_t pos = 0;
    if (s.rfind("1/", 0) == 0) {
      const double n = std::stod(s.substr(2), &pos);
      OMNI_CHECK(pos == s.size() - 2 && n >= 1, ConfigError, "bad --scale '", text,
                 "': 1/N needs N ≥ 1");
      value = 1.0 / n;
    } else {
      value = std::stod(s, &pos);
      OMNI_CHECK(pos == s.size(), ConfigError, "bad --scale '", text, "'");
    }
  } catch (const std::logic_error&) {
    throw ConfigError(detail::concat("bad --scale '", text,
                                     "': use a fraction of the real sizes in (0, 1], e.g. "
                                     "0.01 or 1/64"));
  }
  OMNI_CHECK(std::isfinite(value) && value > 0 && value <= 1, ConfigError, "bad --scale '", text,
             "': it must lie in (0, 1] (1 is the real size; 1/64 moves 1/64 of the bytes)");
  return {value, s};
}

Scale Scale::reciprocal(std::int64_t n) {
  OMNI_INTERNAL_ASSERT(n >= 1);
  return {1.0 / static_cast<double>(n), n == 1 ? "1" : "1/" + std::to_string(n)};
}

std::vector<std::int64_t> scaled_sizes(const std::vector<std::int64_t>& sizes, double scale) {
  if (scale >= 1.0 || sizes.empty()) return sizes;
  std::vector<std::size_t> order(sizes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return sizes[a] > sizes[b]; });
  auto out = sizes;
  // Shrink the k largest dimensions evenly, with the smallest k that keeps
  // each of them at kMinDim or more: a weight keeps its long side and the
  // element count lands close to scale times the original.
  constexpr double kMinDim = 8;
  for (std::size_t k = 1; k <= order.size(); ++k) {
    const double factor = std::pow(scale, 1.0 / static_cast<double>(k));
    if (static_cast<double>(sizes[order[k - 1]]) * factor < kMinDim) continue;
    for (std::size_t i = 0; i < k; ++i)
      out[order[i]] =
          std::max<std::int64_t>(1, std::llround(static_cast<double>(sizes[order[i]]) * factor));
    return out;
  }
  // A small tensor: take the factor off the largest dimension first, then the
  // next once that one is down to 1.
  double remaining = scale;
  for (auto i : order) {
    if (remaining >= 0.75) break;  // close enough: another dimension would overshoot
    const auto d = sizes[i];
    if (d <= 1) continue;
    const auto shrunk = std::max<std::int64_t>(1, std::llround(static_cast<double>(d) * remaining));
    out[i] = shrunk;
    remaining /= static_cast<double>(shrunk) / static_cast<double>(d);
  }
  return out;
}

std::int64_t WeightProfile::parameters() const {
  std::int64_t n = 0;
  for (const auto& c : components) n += c.parameters();
  return n;
}

std::uint64_t WeightProfile::bytes() const {
  std::uint64_t n = 0;
  for (const auto& c : components) n += c.bytes(dtype);
  return n;
}

std::uint64_t WeightProfile::largest_tensor_bytes() const {
  std::uint64_t n = 0;
  for (const auto& c : components) n = std::max(n, c.largest_tensor_bytes(dtype));
  return n;
}

WeightProfile WeightProfile::scaled(const Scale& s) const {
  WeightProfile out = *this;
  out.scale = s;
  for (auto& c : out.components)
    for (auto& t : c.tensors) t.sizes = scaled_sizes(t.sizes, s.value);
  return out;
}

namespace {

using Shapes = std::vector<TensorShape>;

void linear(Shapes& out, const std::string& prefix, std::int64_t in, std::int64_t features,
            bool bias = true) {
  out.push_back({prefix + ".weight", {features, in}});
  if (bias) out.push_back({prefix + ".bias", {features}});
}

// transformers' UMT5EncoderModel at the UMT5-XXL config of Wan2.2: every layer
// keeps its own relative-attention bias; `encoder.embed_tokens` is tied to
// `shared` and so is not a tensor of its own.
ComponentShapes umt5_xxl_encoder() {
  constexpr std::int64_t vocab = 256384, d_model = 4096, d_kv = 64, heads = 64, d_ff = 10240,
                         layers = 24, buckets = 32;
  constexpr std::int64_t inner = heads * d_kv;
  ComponentShapes c{"text_encoder", "UMT5EncoderModel", offload::Role::encoder, {}};
  auto& t = c.tensors;
  t.push_back({"shared.weight", {vocab, d_model}});
  for (std::int64_t i = 0; i < layers; ++i) {
    const std::string layer = "encoder.block." + std::to_string(i) + ".layer.";
    const std::string attention = layer + "0.SelfAttention.";
    linear(t, attention + "q", d_model, inner, false);
    linear(t, attention + "k", d_model, inner, false);
    linear(t, attention + "v", d_model, inner, false);
    linear(t, attention + "o", inner, d_model, false);
    t.push_back({attention + "relative_attention_bias.weight", {buckets, heads}});
    t.push_back({layer + "0.layer_norm.weight", {d_model}});
    const std::string ff = layer + "1.DenseReluDense.";
    linear(t, ff + "wi_0", d_model, d_ff, false);
    linear(t, ff + "wi_1", d_model, d_ff, false);
    linear(t, ff + "wo", d_ff, d_model, false);
    t.push_back({layer + "1.layer_norm.weight", {d_model}});
  }
  t.push_back({"encoder.final_layer_norm.weight", {d_model}});
  return c;
}

void wan_attention(Shapes& t, const std::string& prefix, std::int64_t dim) {
  linear(t, prefix + "to_q", dim, dim);
  linear(t, prefix + "to_k", dim, dim);
  linear(t, prefix + "to_v", dim, dim);
  linear(t, prefix + "to_out.0", dim, dim);
  t.push_back({prefix + "norm_q.weight", {dim}});  // qk_norm rms_norm_across_heads
  t.push_back({prefix + "norm_k.weight", {dim}});
}

// diffusers' WanTransformer3DModel at the A14B config: patch [1,2,2], 40 heads
// of 128, in/out 16 channels, text 4096, freq 256, ffn 13824, 40 layers,
// cross_attn_norm, no image embedder. 14,288,491,584 parameters.
ComponentShapes wan_a14b_expert(std::string name) {
  constexpr std::int64_t dim = 40 * 128, ffn = 13824, text = 4096, freq = 256, channels = 16,
                         layers = 40;
  ComponentShapes c{std::move(name), "WanTransformer3DModel", offload::Role::dit, {}};
  auto& t = c.tensors;
  t.push_back({"patch_embedding.weight", {dim, channels, 1, 2, 2}});
  t.push_back({"patch_embedding.bias", {dim}});
  linear(t, "condition_embedder.time_embedder.linear_1", freq, dim);
  linear(t, "condition_embedder.time_embedder.linear_2", dim, dim);
  linear(t, "condition_embedder.time_proj", dim, 6 * dim);
  linear(t, "condition_embedder.text_embedder.linear_1", text, dim);
  linear(t, "condition_embedder.text_embedder.linear_2", dim, dim);
  for (std::int64_t i = 0; i < layers; ++i) {
    const std::string block = "blocks." + std::to_string(i) + ".";
    wan_attention(t, block + "attn1.", dim);
    wan_attention(t, block + "attn2.", dim);
    t.push_back({block + "norm2.weight", {dim}});
    t.push_back({block + "norm2.bias", {dim}});
    linear(t, block + "ffn.net.0.proj", dim, ffn);
    linear(t, block + "ffn.net.2", ffn, dim);
    t.push_back({block + "scale_shift_table", {1, 6, dim}});
  }
  linear(t, "proj_out", dim, channels * 1 * 2 * 2);
  t.push_back({"scale_shift_table", {1, 2, dim}});
  return c;
}

void causal_conv3d(Shapes& t, const std::string& prefix, std::int64_t in, std::int64_t out,
                   std::int64_t kt, std::int64_t ks) {
  t.push_back({prefix + ".weight", {out, in, kt, ks, ks}});
  t.push_back({prefix + ".bias", {out}});
}

void residual_block(Shapes& t, const std::string& prefix, std::int64_t in, std::int64_t out) {
  t.push_back({prefix + "norm1.gamma", {in, 1, 1, 1}});
  causal_conv3d(t, prefix + "conv1", in, out, 3, 3);
  t.push_back({prefix + "norm2.gamma", {out, 1, 1, 1}});
  causal_conv3d(t, prefix + "conv2", out, out, 3, 3);
  if (in != out) causal_conv3d(t, prefix + "conv_shortcut", in, out, 1, 1);
}

void mid_block(Shapes& t, const std::string& prefix, std::int64_t dim) {
  // diffusers registers `attentions` before `resnets`.
  t.push_back({prefix + "attentions.0.norm.gamma", {dim, 1, 1}});
  t.push_back({prefix + "attentions.0.to_qkv.weight", {3 * dim, dim, 1, 1}});
  t.push_back({prefix + "attentions.0.to_qkv.bias", {3 * dim}});
  t.push_back({prefix + "attentions.0.proj.weight", {dim, dim, 1, 1}});
  t.push_back({prefix + "attentions.0.proj.bias", {dim}});
  residual_block(t, prefix + "resnets.0.", dim, dim);
  residual_block(t, prefix + "resnets.1.", dim, dim);
}

// diffusers' AutoencoderKLWan at the Wan2.1 VAE config shared by A14B:
// base_dim 96, z_dim 16, dim_mult [1,2,4,4], 2 residual blocks per level,
// temporal downsampling [false,true,true], no attention scales.
ComponentShapes wan21_vae() {
  constexpr std::int64_t base = 96, z = 16, res_blocks = 2;
  const std::vector<std::int64_t> mult = {1, 2, 4, 4};
  const std::vector<bool> temporal_down = {false, true, true};
  const auto levels = mult.size();
  ComponentShapes c{"vae", "AutoencoderKLWan", offload::Role::vae, {}};
  auto& t = c.tensors;

  std::int64_t dim = base;
  causal_conv3d(t, "encoder.conv_in", 3, dim, 3, 3);
  int index = 0;
  for (std::size_t i = 0; i < levels; ++i) {
    const std::int64_t out = base * mult[i];
    for (std::int64_t r = 0; r < res_blocks; ++r) {
      residual_block(t, "encoder.down_blocks." + std::to_string(index++) + ".", dim, out);
      dim = out;
    }
    if (i != levels - 1) {
      const std::string resample = "encoder.down_blocks." + std::to_string(index++) + ".";
      t.push_back({resample + "resample.1.weight", {dim, dim, 3, 3}});
      t.push_back({resample + "resample.1.bias", {dim}});
      if (temporal_down[i]) causal_conv3d(t, resample + "time_conv", dim, dim, 3, 1);
    }
  }
  mid_block(t, "encoder.mid_block.", dim);
  t.push_back({"encoder.norm_out.gamma", {dim, 1, 1, 1}});
  causal_conv3d(t, "encoder.conv_out", dim, 2 * z, 3, 3);
  causal_conv3d(t, "quant_conv", 2 * z, 2 * z, 1, 1);
  causal_conv3d(t, "post_quant_conv", z, z, 1, 1);

  dim = base * mult.back();
  causal_conv3d(t, "decoder.conv_in", z, dim, 3, 3);
  mid_block(t, "decoder.mid_block.", dim);
  for (std::size_t i = 0; i < levels; ++i) {
    const std::int64_t in = i == 0 ? dim : dim / 2;  // after an upsampler's dim / 2
    const std::int64_t out = base * mult[levels - 1 - i];
    const std::string up = "decoder.up_blocks." + std::to_string(i) + ".";
    for (std::int64_t r = 0; r <= res_blocks; ++r)
      residual_block(t, up + "resnets." + std::to_string(r) + ".", r == 0 ? in : out, out);
    if (i != levels - 1) {
      // temperal_upsample is temperal_downsample reversed.
      const bool temporal = temporal_down[levels - 2 - i];
      t.push_back({up + "upsamplers.0.resample.1.weight", {out / 2, out, 3, 3}});
      t.push_back({up + "upsamplers.0.resample.1.bias", {out / 2}});
      if (temporal) causal_conv3d(t, up + "upsamplers.0.time_conv", out, 2 * out, 3, 1);
    }
    dim = out;
  }
  t.push_back({"decoder.norm_out.gamma", {dim, 1, 1, 1}});
  causal_conv3d(t, "decoder.conv_out", dim, 3, 3, 3);
  return c;
}

}  // namespace

std::vector<std::string> profile_names() {
  return {"wan2.2-t2v-a14b"};
}

WeightProfile make_profile(std::string_view name) {
  if (name == "wan2.2-t2v-a14b") {
    WeightProfile p;
    p.name = std::string(name);
    p.description =
        "Wan-AI/Wan2.2-T2V-A14B-Diffusers: UMT5-XXL encoder, two 14B experts, Wan2.1 VAE";
    p.dtype = torch::kBFloat16;
    p.components = {umt5_xxl_encoder(), wan_a14b_expert("transformer"),
                    wan_a14b_expert("transformer_2"), wan21_vae()};
    return p;
  }
  std::string known;
  for (const auto& n : profile_names()) known += (known.empty() ? "" : ", ") + n;
  throw ConfigError(detail::concat("unknown profile '", name, "'; known: ", known));
}

Scale scale_to_fit(const WeightProfile& full, std::uint64_t budget_bytes) {
  const auto bytes = full.bytes();
  if (bytes <= budget_bytes) return Scale::reciprocal(1);
  auto n = static_cast<std::int64_t>(std::ceil(
      static_cast<double>(bytes) / static_cast<double>(std::max<std::uint64_t>(1, budget_bytes))));
  // Shrinking rounds each tensor, so check and step.
  for (int guard = 0; guard < 64 && full.scaled(Scale::reciprocal(n)).bytes() > budget_bytes;
       ++guard)
    n += std::max<std::int64_t>(1, n / 64);
  return Scale::reciprocal(n);
}

}  // namespace omni::bench
