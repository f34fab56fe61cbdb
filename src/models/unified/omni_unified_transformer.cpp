// OmniUnifiedTransformer: the reasoner and the generator under one module.
#include "omni/models/unified/omni_unified_transformer.h"

#include <torch/torch.h>

#include "models/wan/parameter_count.h"
#include "omni/error.h"

namespace omni::models::unified {

OmniUnifiedTransformerImpl::OmniUnifiedTransformerImpl(const OmniUnifiedTransformerConfig& config)
    : config_(config) {
  // The reasoner validates the whole config (the generator's part included)
  // before anything else is built.
  reasoner = register_module("reasoner", OmniReasoner(config_));
  generator = register_module("generator", models::wan::WanTransformer3DModel(config_.generator));
}

std::vector<std::string> OmniUnifiedTransformerImpl::non_persistent_buffers() {
  std::vector<std::string> names;
  for (const auto& name : models::wan::WanTransformer3DModelImpl::non_persistent_buffers())
    names.push_back("generator." + name);
  return names;
}

void OmniUnifiedTransformerImpl::load_weights(const io::Checkpoint& checkpoint,
                                              const io::LoadOptions& options) {
  io::load_state_dict(*this, checkpoint, non_persistent_buffers(), options);
}

void OmniUnifiedTransformerImpl::to_inference_dtype(torch::ScalarType dtype) {
  torch::NoGradGuard no_grad;
  reasoner->to(dtype);
  generator->to_inference_dtype(dtype);
}

std::int64_t OmniUnifiedTransformerImpl::parameter_count(const OmniUnifiedTransformerConfig& c) {
  c.validate();
  // Note [Counting parameters without overflow] (models/wan/parameter_count.h).
  const auto reasoner = models::wan::internal::count_parameters("OmniReasoner", [&c](auto zero) {
    using N = decltype(zero);
    const N d = N(c.reasoner_dim);
    auto linear = [](N in, N out) { return in * out + out; };
    const N block =
        2 * d + 4 * linear(d, d) + linear(d, N(c.reasoner_ffn)) + linear(N(c.reasoner_ffn), d);
    return (N(c.vocab_size) + N(c.max_tokens)) * d + N(c.reasoner_layers) * block + d;
  });
  return reasoner + models::wan::WanTransformer3DModelImpl::parameter_count(c.generator);
}

}  // namespace omni::models::unified
