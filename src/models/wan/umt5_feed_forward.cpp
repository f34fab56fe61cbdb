// UMT5DenseGatedActDense / UMT5DenseActDense.
#include <torch/torch.h>

#include "omni/error.h"
#include "omni/models/wan/umt5_layers.h"

namespace omni::models::wan {

namespace {

torch::Tensor activate(UMT5Activation act, const torch::Tensor& x) {
  switch (act) {
    case UMT5Activation::kGeluTanh:
      return torch::gelu(x, "tanh");
    case UMT5Activation::kGelu:
      return torch::gelu(x);
    case UMT5Activation::kRelu:
      return torch::relu(x);
    case UMT5Activation::kSilu:
      return torch::silu(x);
  }
  OMNI_INTERNAL_ASSERT(false, "unhandled UMT5Activation");
}

torch::nn::Linear no_bias(std::int64_t in, std::int64_t out) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false));
}

}  // namespace

UMT5DenseActDenseImpl::UMT5DenseActDenseImpl(const UMT5Config& config) : act_(config.dense_act_fn) {
  if (config.is_gated_act) {
    wi_0 = register_module("wi_0", no_bias(config.d_model, config.d_ff));
    wi_1 = register_module("wi_1", no_bias(config.d_model, config.d_ff));
  } else {
    wi = register_module("wi", no_bias(config.d_model, config.d_ff));
  }
  wo = register_module("wo", no_bias(config.d_ff, config.d_model));
}

torch::Tensor UMT5DenseActDenseImpl::forward(const torch::Tensor& x) {
  auto h = wi ? activate(act_, wi(x)) : activate(act_, wi_0(x)) * wi_1(x);
  // transformers keeps `wo` in float32 for some half-precision checkpoints;
  // feed it its own dtype.
  return wo(h.to(wo->weight.scalar_type()));
}

}  // namespace omni::models::wan
