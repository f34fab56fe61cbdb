// Weight profiles for `omni bench offload`: the tensor shapes of a real
// pipeline's components, with no weights attached (plan first, then build).
//
//   auto profile = omni::bench::make_profile("wan2.2-t2v-a14b").scaled(1.0 / 64);
//   profile.bytes();                  // what the benchmark will move around
//
// Shapes and dotted names follow the diffusers/transformers checkpoints
// (UMT5EncoderModel, WanTransformer3DModel, AutoencoderKLWan), so the module
// trees built from them look like the real ones to the offload backend:
// the same components, the same blocks, the same tensor counts and sizes.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "omni/offload/components.h"

namespace omni::bench {

struct TensorShape {
  std::string name;  // dotted, relative to the component ("blocks.0.attn1.to_q.weight")
  std::vector<std::int64_t> sizes;
  std::int64_t numel() const;
};

// One component of a pipeline: its role for offload and its tensors in
// registration (state-dict) order.
struct ComponentShapes {
  std::string name;        // attribute of the pipeline: "text_encoder", "transformer", ...
  std::string class_name;  // "UMT5EncoderModel", ...
  offload::Role role = offload::Role::dit;
  std::vector<TensorShape> tensors;

  std::int64_t parameters() const;
  std::uint64_t bytes(torch::ScalarType dtype) const;
  std::uint64_t largest_tensor_bytes(torch::ScalarType dtype) const;
};

// A scale factor for every tensor's bytes, in (0, 1]; "1", "0.01" or "1/64".
struct Scale {
  double value = 1.0;
  std::string text = "1";
  // ConfigError unless the text is a number or 1/N in (0, 1].
  static Scale parse(std::string_view text);
  static Scale reciprocal(std::int64_t n);
};

// The sizes of a tensor shrunk so that its element count is about `scale`
// times the original: the fewest largest dimensions shrink evenly (so each
// keeps 8 or more); a tensor too small for that loses its largest dimension
// first, then the next. Every dimension keeps at least one element.
std::vector<std::int64_t> scaled_sizes(const std::vector<std::int64_t>& sizes, double scale);

struct WeightProfile {
  std::string name;
  std::string description;
  torch::ScalarType dtype = torch::kBFloat16;
  Scale scale;
  // Components in the order a request runs them (encoder → experts → VAE).
  std::vector<ComponentShapes> components;

  std::int64_t parameters() const;
  std::uint64_t bytes() const;
  std::uint64_t largest_tensor_bytes() const;
  // The same profile with every tensor shrunk by `scale` (relative to full size).
  WeightProfile scaled(const Scale& scale) const;
};

// "wan2.2-t2v-a14b".
std::vector<std::string> profile_names();
// The full-size profile; ConfigError listing the known names otherwise.
WeightProfile make_profile(std::string_view name);

// The largest 1/N (N ≥ 1) at which the profile's bytes are at most `budget_bytes`.
Scale scale_to_fit(const WeightProfile& full, std::uint64_t budget_bytes);

}  // namespace omni::bench
