// PromptCache (Note [Prompt cache]): bounded LRU of text-encoder outputs.
#include "omni/pipelines/prompt_cache.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace omni::pipelines {
namespace {

torch::Tensor ids(std::vector<std::int64_t> v) {
  return torch::tensor(v, torch::kInt64).unsqueeze(0);
}

TEST(PromptCache, HitsMissesAndBitwiseCopies) {
  PromptCache cache(1 << 20);
  int encoded = 0;
  const auto value = torch::randn({1, 4, 8});
  auto encode = [&] {
    ++encoded;
    return value;
  };
  const auto first = encode_cached(&cache, "enc", {ids({1, 2, 3})}, torch::kCPU, encode);
  const auto second = encode_cached(&cache, "enc", {ids({1, 2, 3})}, torch::kCPU, encode);
  EXPECT_EQ(encoded, 1);
  EXPECT_TRUE(torch::equal(first, second));
  EXPECT_NE(second.data_ptr(), value.data_ptr());  // a copy, never the stored tensor
  // Other tokens, another encoder, another shape of the same bytes: misses.
  encode_cached(&cache, "enc", {ids({1, 2, 4})}, torch::kCPU, encode);
  encode_cached(&cache, "other", {ids({1, 2, 3})}, torch::kCPU, encode);
  encode_cached(&cache, "enc", {ids({1, 2, 3}).view({3, 1})}, torch::kCPU, encode);
  EXPECT_EQ(encoded, 4);
  const auto s = cache.stats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 4u);
  EXPECT_EQ(s.entries, 4u);
  EXPECT_GE(s.bytes, 4 * value.nbytes());
  EXPECT_EQ(s.capacity_bytes, 1u << 20);
}

TEST(PromptCache, BoundedByBytesLeastRecentlyUsedFirst) {
  const auto value = torch::zeros({256});  // 1 KiB
  PromptCache cache(3 * 1024 + 3 * 256);   // three entries and their keys
  auto put = [&](std::int64_t token) {
    encode_cached(&cache, "e", {ids({token})}, torch::kCPU, [&] { return value; });
  };
  put(1);
  put(2);
  put(3);
  put(1);  // a hit: 1 is now the most recently used
  put(4);  // evicts 2
  EXPECT_EQ(cache.stats().entries, 3u);
  EXPECT_LE(cache.stats().bytes, 3 * 1024u + 3 * 256u);
  const auto misses = cache.stats().misses;
  put(1);
  put(3);
  put(4);
  EXPECT_EQ(cache.stats().misses, misses);
  put(2);
  EXPECT_EQ(cache.stats().misses, misses + 1);
  // Larger than the whole cache: encoded, not kept, nothing evicted.
  const auto before = cache.stats();
  encode_cached(&cache, "e", {ids({9})}, torch::kCPU, [] { return torch::zeros({4096}); });
  EXPECT_EQ(cache.stats().entries, before.entries);
  EXPECT_EQ(cache.stats().bytes, before.bytes);
}

TEST(PromptCache, ZeroBytesOrNoCacheAlwaysEncodes) {
  PromptCache off(0);
  int encoded = 0;
  auto encode = [&] {
    ++encoded;
    return torch::ones({2});
  };
  for (int i = 0; i < 3; ++i) encode_cached(&off, "e", {ids({1})}, torch::kCPU, encode);
  encode_cached(nullptr, "e", {ids({1})}, torch::kCPU, encode);
  EXPECT_EQ(encoded, 4);
  EXPECT_EQ(off.stats().misses, 3u);  // still counted: each ran the encoder
  EXPECT_EQ(off.stats().entries, 0u);
}

}  // namespace
}  // namespace omni::pipelines
