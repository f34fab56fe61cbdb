#include "omni/pipelines/prompt_cache.h"

#include <torch/torch.h>

namespace omni::pipelines {

PromptCache::PromptCache(std::uint64_t capacity_bytes) : capacity_(capacity_bytes) {
  stats_.capacity_bytes = capacity_bytes;
}

std::string PromptCache::key(const std::string& encoder, const std::vector<torch::Tensor>& inputs) {
  std::string k = encoder;
  for (const auto& input : inputs) {
    const auto host = input.to(torch::kCPU).contiguous();
    // Dtype and shape first: the same bytes in another layout are other tokens.
    k += '\0' + std::string(c10::toString(host.scalar_type()));
    for (const auto size : host.sizes()) k += ',' + std::to_string(size);
    k += ':';
    k.append(static_cast<const char*>(host.data_ptr()), host.nbytes());
  }
  return k;
}

torch::Tensor PromptCache::find(const std::string& key) {
  std::lock_guard lock(mutex_);
  const auto it = index_.find(key);
  if (it == index_.end()) {
    ++stats_.misses;
    return {};
  }
  ++stats_.hits;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->value;
}

bool PromptCache::contains(const std::string& key) const {
  std::lock_guard lock(mutex_);
  return index_.count(key) > 0;
}

void PromptCache::insert(const std::string& key, const torch::Tensor& value) {
  const std::uint64_t bytes = value.nbytes() + key.size();
  if (bytes > capacity_) return;
  auto host = value.to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true).contiguous();
  std::lock_guard lock(mutex_);
  if (const auto it = index_.find(key); it != index_.end()) {
    stats_.bytes -= it->second->bytes;
    lru_.erase(it->second);
    index_.erase(it);
  }
  while (!lru_.empty() && stats_.bytes + bytes > capacity_) {
    stats_.bytes -= lru_.back().bytes;
    index_.erase(lru_.back().key);
    lru_.pop_back();
  }
  lru_.push_front({key, std::move(host), bytes});
  index_[key] = lru_.begin();
  stats_.bytes += bytes;
  stats_.entries = lru_.size();
}

PromptCacheStats PromptCache::stats() const {
  std::lock_guard lock(mutex_);
  auto s = stats_;
  s.entries = lru_.size();
  return s;
}

torch::Tensor encode_cached(PromptCache* cache, const std::string& encoder,
                            const std::vector<torch::Tensor>& inputs, torch::Device device,
                            const std::function<torch::Tensor()>& encode) {
  if (cache == nullptr) return encode();
  const std::string key = PromptCache::key(encoder, inputs);
  if (auto hit = cache->find(key); hit.defined())
    return hit.to(device, /*non_blocking=*/false, /*copy=*/true);
  auto value = encode();
  cache->insert(key, value);
  return value;
}

}  // namespace omni::pipelines
