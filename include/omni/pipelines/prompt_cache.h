// PromptCache: text-encoder outputs kept in host memory, so that a prompt
// seen before (and the negative prompt nearly every request shares) needs
// neither the encoder nor its upload.
//
//   omni::pipelines::PromptCache cache(256 << 20);   // bytes; 0 keeps nothing
//   auto embeds = omni::pipelines::encode_cached(
//       context.prompt_cache, "WanPipeline@…", {ids, mask}, device,
//       [&] { return text_encoder(ids, mask); });
//
// Note [Prompt cache]
// The key is the encoder's identity (which encoder, its dtype and sequence
// length: whatever changes its output for the same tokens) and the exact
// token ids (and mask) it would read; the value is the encoder's output as
// the pipeline uses it, copied to the host. A hit copies those bytes back to
// the compute device, so what the denoiser reads is bitwise what the encoder
// would have produced, and the encoder, not being called, is not uploaded
// either. Bounded by bytes, least recently used first out; an entry larger
// than the whole capacity is not kept. Thread-safe (the server's metrics
// read the counters while its engine thread encodes).
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace omni::pipelines {

struct PromptCacheStats {
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;  // each one ran the encoder
  std::uint64_t bytes = 0;   // held now
  std::uint64_t entries = 0;
  std::uint64_t capacity_bytes = 0;
};

class PromptCache {
 public:
  explicit PromptCache(std::uint64_t capacity_bytes);
  PromptCache(const PromptCache&) = delete;
  PromptCache& operator=(const PromptCache&) = delete;

  // The key of an encoder's output: `encoder` names the encoder, `inputs`
  // are the tensors it reads (token ids, mask), compared byte for byte.
  static std::string key(const std::string& encoder, const std::vector<torch::Tensor>& inputs);

  // The host tensor stored under `key` (and a hit), or an undefined tensor (and a miss).
  torch::Tensor find(const std::string& key);
  // Whether `key` is held; counts neither a hit nor a miss and keeps the LRU order.
  bool contains(const std::string& key) const;
  // Stores a host copy of `value`, evicting the least recently used entries to fit.
  void insert(const std::string& key, const torch::Tensor& value);

  PromptCacheStats stats() const;

 private:
  struct Entry {
    std::string key;
    torch::Tensor value;  // on the host
    std::uint64_t bytes = 0;
  };
  const std::uint64_t capacity_;
  mutable std::mutex mutex_;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  PromptCacheStats stats_;
};

// The encoder's output for `inputs` on `device`: from `cache` when it holds
// it, else from `encode()` (then stored). A null cache always encodes.
torch::Tensor encode_cached(PromptCache* cache, const std::string& encoder,
                            const std::vector<torch::Tensor>& inputs, torch::Device device,
                            const std::function<torch::Tensor()>& encode);

}  // namespace omni::pipelines
