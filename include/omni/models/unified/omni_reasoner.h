// OmniReasoner: the `reasoner` of OmniUnifiedTransformer, a small causal
// (decoder-only, GPT-style) transformer that reads the prompt's tokens once
// and hands its hidden states to the generator's cross-attention.
//
//   token ids ─ embed_tokens + embed_positions ─ layers × [x + attn(norm1(x));
//               x + ffn(norm2(x))] ─ norm_out ─ zero past each prompt's length
//
// Positions are learned (`embed_positions` [max_tokens, dim], GPT-2 style):
// prompts are short and right-padded, so absolute positions are exact and
// cost one small table. Attention is causal and masks padded keys; with the
// tokenizer's right padding a real token never sees a pad, so its hidden
// state does not depend on how much padding follows (Note [Reasoner masks]).
//
// Parameter names (under `reasoner.` in the checkpoint):
//   embed_tokens.weight [vocab_size, dim], embed_positions.weight [max_tokens, dim],
//   layers.N.norm1.weight, layers.N.attn.{to_q,to_k,to_v,to_out}.{weight,bias},
//   layers.N.norm2.weight, layers.N.ffn.{fc_in,fc_out}.{weight,bias}, norm_out.weight.
#pragma once

#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>

#include <cstdint>
#include <vector>

#include "omni/models/unified/omni_unified_config.h"
#include "omni/nn/layers.h"
#include "omni/nn/module.h"

namespace omni::models::unified {

// Multi-head self-attention with an additive mask: q/k/v/out projections
// with biases, softmax(q·kᵀ/√head_dim + mask)·v.
class OmniReasonerAttentionImpl : public omni::nn::Module {
 public:
  OmniReasonerAttentionImpl(std::int64_t dim, std::int64_t heads);
  // x [B, L, dim]; additive_mask broadcastable to [B, heads, L, L].
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& additive_mask);

  torch::nn::Linear to_q{nullptr}, to_k{nullptr}, to_v{nullptr}, to_out{nullptr};

 private:
  std::int64_t heads_;
};
OMNI_MODULE(OmniReasonerAttention);

// fc_out(gelu_tanh(fc_in(x))).
class OmniReasonerFeedForwardImpl : public omni::nn::Module {
 public:
  OmniReasonerFeedForwardImpl(std::int64_t dim, std::int64_t hidden);
  torch::Tensor forward(const torch::Tensor& x);

  torch::nn::Linear fc_in{nullptr}, fc_out{nullptr};
};
OMNI_MODULE(OmniReasonerFeedForward);

// One pre-norm block: x + attn(norm1(x)), then + ffn(norm2(x)).
class OmniReasonerBlockImpl : public omni::nn::Module {
 public:
  explicit OmniReasonerBlockImpl(const OmniUnifiedTransformerConfig& config);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& additive_mask);

  omni::nn::RMSNorm norm1{nullptr}, norm2{nullptr};
  OmniReasonerAttention attn{nullptr};
  OmniReasonerFeedForward ffn{nullptr};
};
OMNI_MODULE(OmniReasonerBlock);

class OmniReasonerImpl : public omni::nn::Module {
 public:
  // Builds the module (random weights); ConfigError when the config is invalid.
  explicit OmniReasonerImpl(const OmniUnifiedTransformerConfig& config);

  // input_ids [B, L] of an integer dtype (ids < vocab_size, 1 ≤ L ≤
  // max_tokens); attention_mask [B, L], 1 for real tokens and 0 for padding,
  // any numeric dtype, or undefined for none. Returns hidden states
  // [B, L, dim] in the weights' dtype, zero wherever the mask is 0.
  // InvalidRequest on bad shapes or ids. Synchronous, caller's thread.
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask = {});

  // The blocks in execution order (holders: calling one runs its hooks).
  const std::vector<OmniReasonerBlock>& blocks() const { return block_list_; }

  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::Embedding embed_positions{nullptr};
  torch::nn::ModuleList layers{nullptr};
  omni::nn::RMSNorm norm_out{nullptr};

 private:
  OmniUnifiedTransformerConfig config_;
  std::vector<OmniReasonerBlock> block_list_;
};
OMNI_MODULE(OmniReasoner);

}  // namespace omni::models::unified
