// A small module tree for offload tests: named encoders and DiTs (Linear
// layers), a VAE, optional parameterless and nested modules, and the sim device.
#pragma once

#include <torch/torch.h>

#include <memory>

#include "omni/device/device.h"
#include "omni/nn/module.h"
#include "omni/offload/components.h"

namespace toy {

// The simulated device the offload tests move weights to.
inline std::unique_ptr<omni::device::Device> sim(omni::device::DeviceOptions options = {}) {
  return omni::device::make_device(omni::device::DeviceSpec::parse("sim"), true, options);
}

class LayerImpl : public omni::nn::Module {
 public:
  LayerImpl(int in, int out, int blocks = 2) {
    list = register_module("blocks", torch::nn::ModuleList());
    for (int i = 0; i < blocks; ++i) {
      linears.push_back(torch::nn::Linear(in, out));
      list->push_back(linears.back());
      in = out;
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    for (auto& l : linears) x = torch::tanh(l(x));
    return x;
  }
  torch::nn::ModuleList list{nullptr};
  std::vector<torch::nn::Linear> linears;
};
OMNI_MODULE(Layer);

// No parameters and no buffers.
class IdentityImpl : public omni::nn::Module {
 public:
  torch::Tensor forward(torch::Tensor x) { return x; }
};
OMNI_MODULE(Identity);

class Group : public omni::nn::Module {};

class ToyPipeline : public omni::nn::Module {
 public:
  ToyPipeline(std::vector<std::string> encoders, std::vector<std::string> dits,
              bool with_identity = false) {
    torch::manual_seed(7);
    for (auto& name : encoders) this->encoders.emplace(name, register_module(name, Layer(8, 8)));
    for (auto& name : dits) this->dits.emplace(name, register_module(name, Layer(8, 8, 3)));
    vae = register_module("vae", Layer(8, 4, 1));
    if (with_identity) identity = register_module("identity", Identity());
    nested = register_module("group", std::make_shared<Group>());
    inner = nested->register_module("inner", Layer(8, 8));
    for (auto& p : parameters()) p.set_requires_grad(false);
  }
  // Runs every encoder, then every DiT `steps` times, then the VAE.
  torch::Tensor run(const torch::Tensor& input, int steps = 2) {
    auto h = torch::zeros_like(input);
    for (auto& [name, e] : encoders) h = h + e(input);
    for (auto& [name, d] : dits)
      for (int i = 0; i < steps; ++i) h = d(h);
    if (identity) h = identity(h);
    return vae(h);
  }
  std::map<std::string, Layer> encoders;
  std::map<std::string, Layer> dits;
  Layer vae{nullptr};
  Identity identity{nullptr};
  std::shared_ptr<Group> nested;
  Layer inner{nullptr};
};

inline omni::offload::ComponentSpec spec(std::vector<std::string> dits,
                                         std::vector<std::string> encoders,
                                         std::vector<std::string> vaes = {"vae"},
                                         std::vector<std::string> residents = {"group.inner"}) {
  return {dits, encoders, vaes, residents};
}

}  // namespace toy
