// WanTransformer3DModel.
#include <torch/torch.h>

#include "models/wan/parameter_count.h"
#include "omni/cancel_point.h"
#include "omni/error.h"
#include "omni/models/wan/wan_transformer.h"

namespace omni::models::wan {

using omni::nn::upcast;

namespace {
const WanTransformer3DConfig& validated(const WanTransformer3DConfig& config) {
  config.validate();
  return config;
}
}  // namespace

WanTransformer3DModelImpl::WanTransformer3DModelImpl(const WanTransformer3DConfig& config)
    : config_(validated(config)) {
  const auto dim = config_.inner_dim();
  const auto& p = config_.patch_size;
  rope = register_module("rope", WanRotaryPosEmbed(config_.attention_head_dim, config_.patch_size,
                                                   config_.rope_max_seq_len));
  patch_embedding = register_module(
      "patch_embedding",
      torch::nn::Conv3d(torch::nn::Conv3dOptions(config_.in_channels, dim, {p[0], p[1], p[2]})
                            .stride({p[0], p[1], p[2]})));
  condition_embedder = register_module(
      "condition_embedder", WanTimeTextEmbedding(dim, config_.freq_dim, config_.text_dim));
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < config_.num_layers; ++i) {
    WanTransformerBlock block(dim, config_.ffn_dim, config_.num_attention_heads, config_.eps,
                              config_.cross_attn_norm);
    blocks->push_back(block);
    block_list_.push_back(block);
  }
  norm_out = register_module("norm_out", omni::nn::FP32LayerNorm(dim, config_.eps, false));
  proj_out = register_module("proj_out",
                             torch::nn::Linear(dim, config_.out_channels * config_.patch_volume()));
  scale_shift_table = register_parameter(
      "scale_shift_table", torch::randn({1, 2, dim}) / std::sqrt(static_cast<double>(dim)));
}

std::vector<std::string> WanTransformer3DModelImpl::non_persistent_buffers() {
  return {"rope.freqs_cos", "rope.freqs_sin"};
}

void WanTransformer3DModelImpl::load_weights(const io::Checkpoint& checkpoint,
                                             const io::LoadOptions& options) {
  io::load_state_dict(*this, checkpoint, non_persistent_buffers(), options);
}

void WanTransformer3DModelImpl::to_inference_dtype(torch::ScalarType dtype) {
  torch::NoGradGuard no_grad;
  to(dtype);
  if (omni::nn::upcast_type(dtype) == dtype) return;
  auto keep_fp32 = [](torch::Tensor& t) { t.set_data(t.to(torch::kFloat)); };
  rope->to(torch::kFloat);
  condition_embedder->time_embedder->to(torch::kFloat);
  keep_fp32(scale_shift_table);
  for (auto& block : block_list_) {
    keep_fp32(block->scale_shift_table);
    block->norm1->to(torch::kFloat);
    if (block->norm2) block->norm2->to(torch::kFloat);
    block->norm3->to(torch::kFloat);
  }
}

std::int64_t WanTransformer3DModelImpl::parameter_count(const WanTransformer3DConfig& c) {
  c.validate();
  // Note [Counting parameters without overflow] (parameter_count.h).
  return internal::count_parameters("WanTransformer3DModel", [&c](auto zero) {
    using N = decltype(zero);
    const N d = N(c.num_attention_heads) * N(c.attention_head_dim);
    const N patch_volume = N(c.patch_size[0]) * N(c.patch_size[1]) * N(c.patch_size[2]);
    auto linear = [](N in, N out) { return in * out + out; };
    const N patch = N(c.in_channels) * patch_volume * d + d;
    const N condition = linear(N(c.freq_dim), d) + linear(d, d)     // time_embedder
                        + linear(d, 6 * d)                          // time_proj
                        + linear(N(c.text_dim), d) + linear(d, d);  // text_embedder
    const N attention = 4 * linear(d, d) + 2 * d;                   // q, k, v, out + q/k RMSNorm
    const N block = 2 * attention + (c.cross_attn_norm ? 2 * d : N(0)) + linear(d, N(c.ffn_dim)) +
                    linear(N(c.ffn_dim), d) + 6 * d;
    const N head = linear(d, N(c.out_channels) * patch_volume) + 2 * d;
    return patch + condition + N(c.num_layers) * block + head;
  });
}

torch::Tensor WanTransformer3DModelImpl::forward(const torch::Tensor& hidden_states,
                                                 const torch::Tensor& timestep,
                                                 const torch::Tensor& encoder_hidden_states) {
  const auto& p = config_.patch_size;
  OMNI_CHECK(hidden_states.dim() == 5 && hidden_states.size(1) == config_.in_channels,
             InvalidRequest, "WanTransformer3DModel: hidden_states must be [B, ",
             config_.in_channels, ", F, H, W], got ", hidden_states.sizes());
  const auto batch = hidden_states.size(0);
  const std::array<std::int64_t, 3> grid = {
      hidden_states.size(2) / p[0], hidden_states.size(3) / p[1], hidden_states.size(4) / p[2]};
  OMNI_CHECK(grid[0] * p[0] == hidden_states.size(2) && grid[1] * p[1] == hidden_states.size(3) &&
                 grid[2] * p[2] == hidden_states.size(4),
             InvalidRequest, "WanTransformer3DModel: F, H, W ", hidden_states.sizes().slice(2),
             " must be multiples of patch_size [", p[0], ", ", p[1], ", ", p[2], "]");
  const auto tokens = grid[0] * grid[1] * grid[2];
  OMNI_CHECK(encoder_hidden_states.dim() == 3 && encoder_hidden_states.size(0) == batch &&
                 encoder_hidden_states.size(2) == config_.text_dim,
             InvalidRequest, "WanTransformer3DModel: encoder_hidden_states must be [", batch,
             ", L, ", config_.text_dim, "], got ", encoder_hidden_states.sizes());
  const bool per_token = timestep.dim() == 2;
  OMNI_CHECK((timestep.dim() == 1 && (timestep.size(0) == batch || timestep.size(0) == 1)) ||
                 (per_token && timestep.size(0) == batch && timestep.size(1) == tokens),
             InvalidRequest, "WanTransformer3DModel: timestep must be [", batch, "] or [", batch,
             ", ", tokens, "] (one per patch token), got ", timestep.sizes());

  const auto weight = patch_embedding->weight;
  const auto dtype = weight.scalar_type();
  auto x = hidden_states.to(weight.device(), dtype);
  const auto rotary = rope(x.sizes());

  x = patch_embedding(x).flatten(2).transpose(1, 2).contiguous();  // [B, tokens, dim]

  const auto text = encoder_hidden_states.to(
      weight.device(), condition_embedder->text_embedder->linear_1->weight.scalar_type());
  const auto t = timestep.to(weight.device()).flatten();
  auto cond = condition_embedder(
      t, text, per_token ? std::optional<std::int64_t>(tokens) : std::optional<std::int64_t>());
  const auto dim = config_.inner_dim();
  // [B, 6, dim], or [B, tokens, 6, dim] per token.
  const auto timestep_proj = per_token ? cond.timestep_proj.reshape({batch, tokens, 6, dim})
                                       : cond.timestep_proj.reshape({-1, 6, dim});

  for (auto& block : block_list_) {
    cancel_point();  // Note [Cancel points inside a step]
    x = block(x, cond.context, timestep_proj, rotary);
  }

  torch::Tensor shift, scale;
  if (per_token) {
    const auto ss = scale_shift_table.unsqueeze(0) + cond.temb.unsqueeze(2);  // [B, S, 2, dim]
    shift = ss.select(2, 0);
    scale = ss.select(2, 1);
  } else {
    const auto ss = scale_shift_table + cond.temb.unsqueeze(1);  // [B, 2, dim]
    shift = ss.narrow(1, 0, 1);
    scale = ss.narrow(1, 1, 1);
  }
  x = (norm_out(upcast(x)) * (1 + scale) + shift).to(x.scalar_type());
  x = proj_out(x);

  // Unpatchify: [B, f, h, w, pt, ph, pw, C] → [B, C, f·pt, h·ph, w·pw].
  x = x.reshape({batch, grid[0], grid[1], grid[2], p[0], p[1], p[2], -1});
  x = x.permute({0, 7, 1, 4, 2, 5, 3, 6});
  return x.reshape({batch, -1, grid[0] * p[0], grid[1] * p[1], grid[2] * p[2]});
}

}  // namespace omni::models::wan
