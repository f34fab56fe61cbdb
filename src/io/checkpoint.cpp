#include "omni/io/checkpoint.h"

#include <algorithm>
#include <set>

#include "omni/error.h"
#include "omni/io/json_config.h"

namespace fs = std::filesystem;

namespace omni::io {

Checkpoint Checkpoint::open_file(const fs::path& path) {
  Checkpoint ckpt;
  ckpt.label_ = path.string();
  auto file = SafetensorsFile::open(path);
  for (const auto& info : file->tensors()) ckpt.index_[info.name] = Entry{file, &info};
  return ckpt;
}

Checkpoint Checkpoint::open_index(const fs::path& index_json) {
  const auto json = read_json_file(index_json);
  const std::string label = index_json.string();
  OMNI_CHECK(json.is_object() && json.contains("weight_map") && json["weight_map"].is_object(),
             FormatError, label, ": missing 'weight_map' object");
  Checkpoint ckpt;
  ckpt.label_ = label;
  std::map<std::string, std::shared_ptr<SafetensorsFile>> shards;
  for (auto it = json["weight_map"].begin(); it != json["weight_map"].end(); ++it) {
    OMNI_CHECK(it.value().is_string(), FormatError, label, ": shard of '", it.key(),
               "' is not a string");
    const auto shard = it.value().get<std::string>();
    OMNI_CHECK(shard.find('/') == std::string::npos && shard.find("..") == std::string::npos,
               FormatError, label, ": shard name '", shard, "' must be a plain file name");
    auto& file = shards[shard];
    if (!file) file = SafetensorsFile::open(index_json.parent_path() / shard);
    const auto* info = file->find(it.key());
    OMNI_CHECK(info != nullptr, FormatError, label, ": tensor '", it.key(), "' is mapped to ",
               shard, " but that shard does not hold it");
    ckpt.index_[it.key()] = Entry{file, info};
  }
  for (const auto& [shard, file] : shards)
    for (const auto& info : file->tensors())
      OMNI_CHECK(ckpt.index_.count(info.name), FormatError, label, ": shard ", shard,
                 " holds tensor '", info.name, "' that the weight_map does not list");
  return ckpt;
}

WeightFiles locate_weights(const fs::path& dir, const std::vector<std::string>& stems) {
  OMNI_CHECK(fs::is_directory(dir), FormatError, dir.string(), ": not a directory");
  for (const auto& stem : stems) {
    if (fs::exists(dir / (stem + ".safetensors")))
      return {.index_json = {}, .file = dir / (stem + ".safetensors")};
    if (fs::exists(dir / (stem + ".safetensors.index.json")))
      return {.index_json = dir / (stem + ".safetensors.index.json"), .file = {}};
  }
  std::vector<fs::path> indexes, files;
  for (const auto& e : fs::directory_iterator(dir)) {
    const auto name = e.path().filename().string();
    if (name.ends_with(".safetensors.index.json"))
      indexes.push_back(e.path());
    else if (name.ends_with(".safetensors"))
      files.push_back(e.path());
  }
  OMNI_CHECK(indexes.size() <= 1, FormatError, dir.string(),
             ": several *.safetensors.index.json files");
  if (indexes.size() == 1) return {.index_json = indexes[0], .file = {}};
  OMNI_CHECK(!files.empty(), FormatError, dir.string(),
             ": no .safetensors weights found (omni reads safetensors only)");
  OMNI_CHECK(files.size() == 1, FormatError, dir.string(),
             ": several .safetensors files and no index.json to say which to use");
  return {.index_json = {}, .file = files[0]};
}

Checkpoint Checkpoint::open_dir(const fs::path& dir, const std::string& stem) {
  const auto where = locate_weights(dir, {stem});
  return where.index_json.empty() ? open_file(where.file) : open_index(where.index_json);
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [name, e] : index_) out.push_back(name);
  return out;
}

const TensorInfo& Checkpoint::info(const std::string& name) const {
  auto it = index_.find(name);
  OMNI_CHECK(it != index_.end(), FormatError, label_, ": missing tensor '", name, "'");
  return *it->second.info;
}

torch::Tensor Checkpoint::view(const std::string& name) const {
  auto it = index_.find(name);
  OMNI_CHECK(it != index_.end(), FormatError, label_, ": missing tensor '", name, "'");
  return it->second.file->view(*it->second.info);
}

std::uint64_t Checkpoint::total_bytes() const {
  std::uint64_t n = 0;
  for (const auto& [name, e] : index_) n += e.info->nbytes();
  return n;
}

std::optional<torch::ScalarType> Checkpoint::stored_dtype() const {
  std::map<torch::ScalarType, std::uint64_t> bytes;
  for (const auto& [name, e] : index_) {
    const auto type = to_scalar_type(e.info->dtype);
    if (c10::isFloatingType(type)) bytes[type] += e.info->nbytes();
  }
  std::optional<torch::ScalarType> best;
  for (const auto& [type, n] : bytes)
    if (!best || n > bytes[*best] ||
        (n == bytes[*best] && c10::elementSize(type) > c10::elementSize(*best)))
      best = type;
  return best;
}

// Note [Weights that alias the file]
// A checkpoint is mapped privately (copy-on-write); its pages are the page
// cache's, which the kernel may drop and read again, and count in no
// process's anonymous memory until something writes to one. A component loaded with alias_mapping
// keeps every tensor whose dtype is the stored one as a view of those pages: loading allocates
// nothing for it (the freshly constructed tensor is released) and an
// offload home is made by one copy from the file (offload/host_home.h), or
// is the file itself when a host memory budget maps it (Note [Mapped
// homes]). Tensors converted to another dtype are copied as before.
std::vector<std::pair<std::string, torch::Tensor>> named_state(
    const torch::nn::Module& module, const std::vector<std::string>& skip_buffers) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& p : module.named_parameters(/*recurse=*/true))
    out.emplace_back(p.key(), p.value());
  for (const auto& b : module.named_buffers(/*recurse=*/true)) {
    const auto& name = b.key();
    const bool skipped = std::any_of(skip_buffers.begin(), skip_buffers.end(), [&](const auto& s) {
      return name == s || (name.size() > s.size() && name.ends_with("." + s));
    });
    if (!skipped) out.emplace_back(name, b.value());
  }
  return out;
}

namespace {
std::string shape_string(c10::IntArrayRef shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}
}  // namespace

void load_state_dict(torch::nn::Module& module, const Checkpoint& checkpoint,
                     const std::vector<std::string>& skip_buffers, const LoadOptions& options) {
  auto state = named_state(module, skip_buffers);
  // Plan first: every check passes before any tensor is written.
  std::set<std::string> expected;
  std::set<const c10::TensorImpl*> satisfied;
  std::vector<std::pair<std::string, torch::Tensor*>> plan;
  for (auto& [name, tensor] : state) expected.insert(name);
  for (auto& [name, tensor] : state) {
    if (!checkpoint.contains(name)) continue;
    const auto& info = checkpoint.info(name);
    OMNI_CHECK(c10::IntArrayRef(info.shape) == tensor.sizes(), FormatError, checkpoint.label(),
               ": shape mismatch for tensor '", name, "': checkpoint has ",
               shape_string(info.shape), ", model expects ", shape_string(tensor.sizes()));
    satisfied.insert(tensor.unsafeGetTensorImpl());
    plan.emplace_back(name, &tensor);
  }
  for (auto& [name, tensor] : state)
    OMNI_CHECK(checkpoint.contains(name) || satisfied.count(tensor.unsafeGetTensorImpl()),
               FormatError, checkpoint.label(), ": missing tensor '", name, "' (shape ",
               shape_string(tensor.sizes()), ")");
  for (const auto& name : checkpoint.names())
    OMNI_CHECK(expected.count(name), FormatError, checkpoint.label(), ": unexpected tensor '", name,
               "' (shape ", shape_string(checkpoint.info(name).shape),
               ") that the model does not have");

  torch::NoGradGuard no_grad;
  for (auto& [name, tensor] : plan) {
    const auto source = checkpoint.view(name);
    if (options.alias_mapping && tensor->device().is_cpu() &&
        source.scalar_type() == tensor->scalar_type()) {
      tensor->set_data(source);  // Note [Weights that alias the file]
      continue;
    }
    if (options.copy)
      options.copy(name, *tensor, source);
    else
      tensor->copy_(source);
  }
}

}  // namespace omni::io
