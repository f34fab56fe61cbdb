// diffusers' FeedForward with activation_fn="gelu-approximate", as the Wan block uses it.
#include <torch/torch.h>

#include "omni/models/wan/wan_transformer_layers.h"

namespace omni::models::wan {

WanGeluProjectionImpl::WanGeluProjectionImpl(std::int64_t dim_in, std::int64_t dim_out) {
  proj = register_module("proj", torch::nn::Linear(dim_in, dim_out));
}

torch::Tensor WanGeluProjectionImpl::forward(const torch::Tensor& x) {
  return torch::gelu(proj(x), "tanh");
}

WanFeedForwardImpl::WanFeedForwardImpl(std::int64_t dim, std::int64_t inner_dim) {
  act_ = WanGeluProjection(dim, inner_dim);
  out_ = torch::nn::Linear(inner_dim, dim);
  // net.1 is the (inactive at inference) dropout; it holds no tensors.
  net = register_module("net", torch::nn::ModuleList(act_, torch::nn::Identity(), out_));
}

torch::Tensor WanFeedForwardImpl::forward(const torch::Tensor& x) {
  return out_(act_(x));
}

}  // namespace omni::models::wan
