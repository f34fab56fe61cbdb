// Module trees built from a WeightProfile, with random bf16 weights.
//
//   CheckpointImage image(profile.largest_tensor_bytes(), /*seed=*/7);
//   auto pipeline = build_pipeline(profile, image, WeightStorage::materialized);
//   pipeline->component(0);   // the text encoder: an omni::nn::Module with blocks as children
//
// The trees are plain module trees (one omni::nn::Module per component, the
// dotted tensor names becoming children), so the real OffloadBackend can
// discover, home and hook them like any pipeline's. They have no forward:
// the benchmark measures movement, and "running" a component means touching
// a few of its weights on the compute device.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench/offload/weight_profile.h"
#include "omni/nn/module.h"

namespace omni::bench {

// Random, finite, non-zero bf16 values (|x| in [2^-7, 2)) standing in for a
// checkpoint's bytes. Owns one host buffer; views into it are tensors that
// cost no memory of their own, the way a safetensors file's mmap'd pages are.
class CheckpointImage {
 public:
  // At least `bytes` (plus a window for varied offsets), filled in parallel.
  CheckpointImage(std::uint64_t bytes, std::uint64_t seed);
  CheckpointImage(const CheckpointImage&) = delete;
  CheckpointImage& operator=(const CheckpointImage&) = delete;

  // A contiguous tensor of `sizes` viewing the image at an offset derived from
  // `name` (so tensors differ). It keeps the image alive.
  torch::Tensor view(const std::string& name, const std::vector<std::int64_t>& sizes,
                     torch::ScalarType dtype) const;
  // Fills dst[0, bytes) with image bytes (tiling the image), in parallel.
  void fill(void* dst, std::size_t bytes) const;
  std::uint64_t bytes() const { return bytes_; }

 private:
  std::shared_ptr<std::uint8_t> data_;
  std::uint64_t bytes_ = 0;
  std::uint64_t window_ = 0;
};

// How the built tree's tensors hold their values.
enum class WeightStorage {
  // Views into the CheckpointImage: no memory of their own, like tensors
  // read from a mmap'd checkpoint. For strategies that copy the weights into
  // homes of their own at enable time.
  image_views,
  // Every tensor in its own pageable host buffer, as a loader leaves weights
  // it has read into CPU memory. For the baselines that move these tensors.
  materialized,
};

class ProfileModuleImpl : public omni::nn::Module {
 public:
  explicit ProfileModuleImpl(std::string name) : omni::nn::Module(std::move(name)) {}
  // The child called `name`, created on first use.
  std::shared_ptr<ProfileModuleImpl> child(const std::string& name);
  void add_tensor(const std::string& name, const torch::Tensor& tensor);

 private:
  std::map<std::string, std::shared_ptr<ProfileModuleImpl>> children_;
};

// The root: one child per component, in the profile's order.
class ProfilePipeline : public omni::nn::Module {
 public:
  explicit ProfilePipeline(std::string name) : omni::nn::Module(std::move(name)) {}
  std::size_t size() const { return components_.size(); }
  ProfileModuleImpl& component(std::size_t index) { return *components_.at(index); }
  // A few of the component's tensors (first, middle, last): what "running" it touches.
  const std::vector<torch::Tensor>& probes(std::size_t index) const { return probes_.at(index); }
  void add_component(const std::string& name, std::shared_ptr<ProfileModuleImpl> module,
                     std::vector<torch::Tensor> probes);

 private:
  std::vector<std::shared_ptr<ProfileModuleImpl>> components_;
  std::vector<std::vector<torch::Tensor>> probes_;
};

std::shared_ptr<ProfilePipeline> build_pipeline(const WeightProfile& profile,
                                                const CheckpointImage& image,
                                                WeightStorage storage);
// The same tree over meta tensors (shapes, no memory): for planning.
std::shared_ptr<ProfilePipeline> build_shape_pipeline(const WeightProfile& profile);

}  // namespace omni::bench
