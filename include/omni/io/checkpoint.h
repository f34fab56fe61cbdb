// Checkpoints: the weights of one component, in one safetensors file or in
// shards listed by a `*.safetensors.index.json`, and loading them into a
// module by exact key name.
#pragma once

#include <torch/nn/module.h>

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "omni/io/safetensors.h"

namespace omni::io {

// Where a component folder keeps its weights: a `*.safetensors.index.json`
// (then `index_json` is set) or one `.safetensors` file (then `file` is).
struct WeightFiles {
  std::filesystem::path index_json;
  std::filesystem::path file;
};

// Looks for `<stem>.safetensors`, then `<stem>.safetensors.index.json`, for
// each stem in order; else the folder's only index.json or only .safetensors
// file. FormatError naming the folder when none (or several candidates) exist.
WeightFiles locate_weights(const std::filesystem::path& dir, const std::vector<std::string>& stems);

class Checkpoint {
 public:
  // Opens one .safetensors file.
  static Checkpoint open_file(const std::filesystem::path& path);
  // Opens a sharded checkpoint from its index.json (`weight_map`: name → shard).
  static Checkpoint open_index(const std::filesystem::path& index_json);
  // Opens the weights that locate_weights(dir, {stem}) finds.
  static Checkpoint open_dir(const std::filesystem::path& dir,
                             const std::string& stem = "diffusion_pytorch_model");

  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;
  // Zero-copy view of the mapped bytes (keeps the mapping alive).
  torch::Tensor view(const std::string& name) const;
  std::string label() const { return label_; }
  std::uint64_t total_bytes() const;
  // The floating-point dtype that holds most of the bytes (ties: the wider);
  // nullopt when no tensor is floating point (Note [Dtype from the checkpoint]).
  std::optional<torch::ScalarType> stored_dtype() const;

 private:
  struct Entry {
    std::shared_ptr<SafetensorsFile> file;
    const TensorInfo* info;
  };
  std::string label_;
  std::map<std::string, Entry> index_;
};

struct LoadOptions {
  // Copies `source` into `destination`; the default is destination.copy_(source).
  // Offload uses it to land weights directly in their host homes.
  std::function<void(const std::string& name, torch::Tensor& destination,
                     const torch::Tensor& source)>
      copy;
  // Note [Weights that alias the file]: a CPU tensor whose dtype is the
  // stored one becomes a view of the read-only mapping instead of a copy
  // (`copy` is not called for it). Never write to such a module's weights.
  bool alias_mapping = false;
};

// Loads every parameter and persistent buffer of `module` from `checkpoint` by
// exact dotted name, converting dtype where the module's differs. FormatError
// naming the tensor when one is missing, unexpected (in the checkpoint but not
// the module) or of another shape (both shapes given). Nothing is modified
// unless every check passes. Tensors that alias each other (tied weights)
// need only one of their names in the checkpoint. `skip_buffers` lists
// non-persistent buffers that are computed, not stored.
void load_state_dict(torch::nn::Module& module, const Checkpoint& checkpoint,
                     const std::vector<std::string>& skip_buffers = {},
                     const LoadOptions& options = {});

// The module's tensors by dotted name (parameters, then buffers), as the
// checkpoint would name them.
std::vector<std::pair<std::string, torch::Tensor>> named_state(
    const torch::nn::Module& module, const std::vector<std::string>& skip_buffers = {});

}  // namespace omni::io
