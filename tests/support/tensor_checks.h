// Tensor helpers the model tests share: comparing against the reference
// fixtures and counting parameters.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <string>

#include "omni/io/safetensors.h"

namespace omni::testing {

// max |a − b|, computed in float64. Different sizes fail the test and give +inf.
inline double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  if (a.sizes() != b.sizes()) return std::numeric_limits<double>::infinity();
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

// Every tensor of a safetensors file, by name.
inline std::map<std::string, torch::Tensor> read_tensors(const std::filesystem::path& path) {
  std::map<std::string, torch::Tensor> out;
  for (auto& [name, tensor] : io::load_safetensors(path)) out[name] = tensor;
  return out;
}

// Parameters of `module`, counting a tensor shared by several names once.
inline std::int64_t distinct_parameter_numel(const torch::nn::Module& module) {
  std::set<const void*> seen;
  std::int64_t n = 0;
  for (const auto& p : module.named_parameters())
    if (seen.insert(p.value().unsafeGetTensorImpl()).second) n += p.value().numel();
  return n;
}

}  // namespace omni::testing
