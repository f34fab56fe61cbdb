// OmniReasoner: the causal prompt transformer of OmniUnifiedTransformer.
#include "omni/models/unified/omni_reasoner.h"

#include <torch/torch.h>

#include "omni/error.h"

namespace omni::models::unified {

namespace {

const OmniUnifiedTransformerConfig& validated(const OmniUnifiedTransformerConfig& config) {
  config.validate();
  return config;
}

}  // namespace

OmniReasonerAttentionImpl::OmniReasonerAttentionImpl(std::int64_t dim, std::int64_t heads)
    : heads_(heads) {
  to_q = register_module("to_q", torch::nn::Linear(dim, dim));
  to_k = register_module("to_k", torch::nn::Linear(dim, dim));
  to_v = register_module("to_v", torch::nn::Linear(dim, dim));
  to_out = register_module("to_out", torch::nn::Linear(dim, dim));
}

torch::Tensor OmniReasonerAttentionImpl::forward(const torch::Tensor& x,
                                                 const torch::Tensor& additive_mask) {
  const auto batch = x.size(0);
  const auto length = x.size(1);
  const auto heads = [&](const torch::Tensor& t) {
    return t.reshape({batch, length, heads_, -1}).transpose(1, 2);
  };
  auto out = omni::nn::scaled_dot_product_attention(heads(to_q(x)), heads(to_k(x)), heads(to_v(x)),
                                                    additive_mask);
  out = out.transpose(1, 2).reshape({batch, length, -1}).to(x.scalar_type());
  return to_out(out);
}

OmniReasonerFeedForwardImpl::OmniReasonerFeedForwardImpl(std::int64_t dim, std::int64_t hidden) {
  fc_in = register_module("fc_in", torch::nn::Linear(dim, hidden));
  fc_out = register_module("fc_out", torch::nn::Linear(hidden, dim));
}

torch::Tensor OmniReasonerFeedForwardImpl::forward(const torch::Tensor& x) {
  return fc_out(torch::gelu(fc_in(x), "tanh"));
}

OmniReasonerBlockImpl::OmniReasonerBlockImpl(const OmniUnifiedTransformerConfig& c) {
  const auto eps = OmniUnifiedTransformerConfig::kReasonerEps;
  norm1 = register_module("norm1", omni::nn::RMSNorm(c.reasoner_dim, eps));
  attn = register_module("attn", OmniReasonerAttention(c.reasoner_dim, c.reasoner_heads));
  norm2 = register_module("norm2", omni::nn::RMSNorm(c.reasoner_dim, eps));
  ffn = register_module("ffn", OmniReasonerFeedForward(c.reasoner_dim, c.reasoner_ffn));
}

torch::Tensor OmniReasonerBlockImpl::forward(const torch::Tensor& x,
                                             const torch::Tensor& additive_mask) {
  auto h = x + attn(norm1(x), additive_mask);
  return h + ffn(norm2(h));
}

OmniReasonerImpl::OmniReasonerImpl(const OmniUnifiedTransformerConfig& config)
    : config_(validated(config)) {
  embed_tokens = register_module("embed_tokens",
                                 torch::nn::Embedding(config_.vocab_size, config_.reasoner_dim));
  embed_positions = register_module("embed_positions",
                                    torch::nn::Embedding(config_.max_tokens, config_.reasoner_dim));
  layers = register_module("layers", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < config_.reasoner_layers; ++i) {
    OmniReasonerBlock block(config_);
    layers->push_back(block);
    block_list_.push_back(block);
  }
  norm_out = register_module(
      "norm_out",
      omni::nn::RMSNorm(config_.reasoner_dim, OmniUnifiedTransformerConfig::kReasonerEps));
}

// Note [Reasoner masks]
// A query at position i may attend to key j when j ≤ i (causal) and key j
// is a real token (attention_mask). The two conditions are combined as
// booleans and turned into one additive mask of finite lowest values, so a
// row whose keys are all masked (a left-padded row, which our tokenizer never
// makes) gives a uniform softmax instead of NaN. With right padding every
// real token's keys are real, so its hidden state is exactly what it would
// be without any padding; padded rows are computed and then zeroed, as
// WanPipeline zeroes the text encoder's output past each prompt.
torch::Tensor OmniReasonerImpl::forward(const torch::Tensor& input_ids,
                                        const torch::Tensor& attention_mask) {
  OMNI_CHECK(input_ids.defined() && input_ids.dim() == 2, InvalidRequest,
             "OmniReasoner: input_ids must be [B, L]");
  OMNI_CHECK(!input_ids.is_floating_point() && !input_ids.is_complex(), InvalidRequest,
             "OmniReasoner: input_ids must have an integer dtype, got ", input_ids.scalar_type());
  const auto batch = input_ids.size(0);
  const auto length = input_ids.size(1);
  OMNI_CHECK(length >= 1 && length <= config_.max_tokens, InvalidRequest,
             "OmniReasoner: input_ids has ", length, " tokens per row; it takes 1..",
             config_.max_tokens, " (max_tokens)");
  if (input_ids.numel() > 0) {
    const auto lo = input_ids.min().item<std::int64_t>();
    const auto hi = input_ids.max().item<std::int64_t>();
    OMNI_CHECK(lo >= 0 && hi < config_.vocab_size, InvalidRequest,
               "OmniReasoner: token ids must lie in [0, ", config_.vocab_size, "), got [", lo, ", ",
               hi, "]");
  }
  OMNI_CHECK(!attention_mask.defined() || attention_mask.sizes() == input_ids.sizes(),
             InvalidRequest, "OmniReasoner: attention_mask ", attention_mask.sizes(),
             " must match input_ids ", input_ids.sizes());

  const auto device = embed_tokens->weight.device();
  const auto ids = input_ids.to(device, torch::kLong);
  const auto positions =
      torch::arange(length, torch::TensorOptions().dtype(torch::kLong).device(device));
  auto h = embed_tokens(ids) + embed_positions(positions).unsqueeze(0);  // [B, L, dim]
  const auto dtype = h.scalar_type();

  // Note [Reasoner masks]: [B, 1, L, L], true where a query may attend.
  auto allowed =
      torch::ones({length, length}, torch::TensorOptions().dtype(torch::kBool).device(device))
          .tril()
          .view({1, 1, length, length});
  torch::Tensor real;
  if (attention_mask.defined()) {
    real = attention_mask.to(device) != 0;  // [B, L]
    allowed = allowed & real.view({batch, 1, 1, length});
  }
  const auto additive_mask =
      torch::zeros(allowed.sizes(), torch::TensorOptions().dtype(dtype).device(device))
          .masked_fill(allowed.logical_not(), omni::nn::lowest_value(dtype));
  for (auto& block : block_list_) h = block(h, additive_mask);
  h = norm_out(h);
  if (real.defined()) h = h.masked_fill(real.logical_not().unsqueeze(-1), 0);
  return h;
}

}  // namespace omni::models::unified
