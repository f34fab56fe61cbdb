#include "bench/offload/profile_pipeline.h"

#include <ATen/Parallel.h>

#include <cstring>
#include <functional>

#include "omni/device/device.h"
#include "omni/error.h"

namespace omni::bench {

namespace {

constexpr std::uint64_t kWindow = 1ull << 20;  // offsets vary within the first MiB

std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Four bf16 lanes per word: random sign and mantissa, exponent 120..127.
constexpr std::uint64_t kLaneMask = 0x83FF83FF83FF83FFull;
constexpr std::uint64_t kLaneBits = 0x3C003C003C003C00ull;

}  // namespace

CheckpointImage::CheckpointImage(std::uint64_t bytes, std::uint64_t seed) : window_(kWindow) {
  const std::uint64_t words = (std::max<std::uint64_t>(bytes, 8) + window_ + 7) / 8;
  bytes_ = words * 8;
  auto* raw = static_cast<std::uint8_t*>(std::malloc(bytes_));
  OMNI_CHECK(raw != nullptr, DeviceOutOfMemory, "host: cannot allocate ",
             device::format_bytes(bytes_), " for the benchmark's checkpoint image");
  data_ = std::shared_ptr<std::uint8_t>(raw, [](std::uint8_t* p) { std::free(p); });
  auto* out = reinterpret_cast<std::uint64_t*>(raw);
  at::parallel_for(0, static_cast<std::int64_t>(words), 1 << 16,
                   [&](std::int64_t begin, std::int64_t end) {
                     std::uint64_t state = seed ^ (static_cast<std::uint64_t>(begin) << 1);
                     for (std::int64_t i = begin; i < end; ++i)
                       out[i] = (splitmix64(state) & kLaneMask) | kLaneBits;
                   });
}

torch::Tensor CheckpointImage::view(const std::string& name, const std::vector<std::int64_t>& sizes,
                                    torch::ScalarType dtype) const {
  const auto element = c10::elementSize(dtype);
  std::int64_t numel = 1;
  for (auto d : sizes) numel *= d;
  const auto bytes = static_cast<std::uint64_t>(numel) * element;
  OMNI_INTERNAL_ASSERT(bytes + window_ <= bytes_, "checkpoint image too small for ", name);
  const auto offset = std::hash<std::string>{}(name) % (window_ / 64) * 64;
  auto keep = data_;
  return torch::from_blob(
      data_.get() + offset, sizes, [keep](void*) {}, torch::TensorOptions().dtype(dtype));
}

void CheckpointImage::fill(void* dst, std::size_t bytes) const {
  auto* out = static_cast<std::uint8_t*>(dst);
  const std::size_t tile = bytes_ - window_;
  const auto tiles = static_cast<std::int64_t>((bytes + tile - 1) / tile);
  at::parallel_for(0, tiles, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const std::size_t at = static_cast<std::size_t>(i) * tile;
      std::memcpy(out + at, data_.get() + (i % 7) * 64, std::min(tile, bytes - at));
    }
  });
}

std::shared_ptr<ProfileModuleImpl> ProfileModuleImpl::child(const std::string& name) {
  auto it = children_.find(name);
  if (it != children_.end()) return it->second;
  auto module = register_module(name, std::make_shared<ProfileModuleImpl>(name));
  children_.emplace(name, module);
  return module;
}

void ProfileModuleImpl::add_tensor(const std::string& name, const torch::Tensor& tensor) {
  register_parameter(name, tensor, /*requires_grad=*/false);
}

void ProfilePipeline::add_component(const std::string& name,
                                    std::shared_ptr<ProfileModuleImpl> module,
                                    std::vector<torch::Tensor> probes) {
  register_module(name, module);
  components_.push_back(std::move(module));
  probes_.push_back(std::move(probes));
}

namespace {

using TensorFactory = std::function<std::vector<torch::Tensor>(const ComponentShapes&)>;

// The module tree over the tensors `make` gives each component.
std::shared_ptr<ProfilePipeline> assemble(const WeightProfile& profile, const TensorFactory& make) {
  auto root = std::make_shared<ProfilePipeline>(profile.name);
  for (const auto& c : profile.components) {
    auto module = std::make_shared<ProfileModuleImpl>(c.class_name);
    const auto tensors = make(c);
    for (std::size_t i = 0; i < c.tensors.size(); ++i) {
      const auto& name = c.tensors[i].name;
      ProfileModuleImpl* node = module.get();
      std::size_t start = 0;
      for (auto dot = name.find('.'); dot != std::string::npos; dot = name.find('.', start)) {
        node = node->child(name.substr(start, dot - start)).get();
        start = dot + 1;
      }
      node->add_tensor(name.substr(start), tensors[i]);
    }
    std::vector<torch::Tensor> probes;
    if (!tensors.empty()) {
      probes.push_back(tensors.front());
      if (tensors.size() > 2) probes.push_back(tensors[tensors.size() / 2]);
      if (tensors.size() > 1) probes.push_back(tensors.back());
    }
    root->add_component(c.name, std::move(module), std::move(probes));
  }
  return root;
}

}  // namespace

std::shared_ptr<ProfilePipeline> build_pipeline(const WeightProfile& profile,
                                                const CheckpointImage& image,
                                                WeightStorage storage) {
  return assemble(profile, [&](const ComponentShapes& c) {
    std::vector<torch::Tensor> tensors(c.tensors.size());
    for (std::size_t i = 0; i < c.tensors.size(); ++i) {
      const auto& shape = c.tensors[i];
      tensors[i] = image.view(c.name + "." + shape.name, shape.sizes, profile.dtype);
    }
    if (storage == WeightStorage::materialized) {
      // Copy every view into its own buffer, several tensors at a time.
      std::vector<torch::Tensor> own(tensors.size());
      for (std::size_t i = 0; i < tensors.size(); ++i)
        own[i] = torch::empty(c.tensors[i].sizes, torch::TensorOptions().dtype(profile.dtype));
      at::parallel_for(0, static_cast<std::int64_t>(tensors.size()), 1,
                       [&](std::int64_t begin, std::int64_t end) {
                         for (std::int64_t i = begin; i < end; ++i)
                           std::memcpy(own[i].data_ptr(), tensors[i].data_ptr(),
                                       own[i].numel() * own[i].element_size());
                       });
      tensors = std::move(own);
    }
    return tensors;
  });
}

std::shared_ptr<ProfilePipeline> build_shape_pipeline(const WeightProfile& profile) {
  return assemble(profile, [&](const ComponentShapes& c) {
    std::vector<torch::Tensor> tensors;
    for (const auto& shape : c.tensors)
      tensors.push_back(torch::empty(
          shape.sizes, torch::TensorOptions().dtype(profile.dtype).device(torch::kMeta)));
    return tensors;
  });
}

}  // namespace omni::bench
