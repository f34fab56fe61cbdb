// The causal feature cache of the Wan VAE blocks (Note [Causal feature cache]): a
// chunked run must equal a causal pass over the whole clip. The fixture has only two
// latent frames, which never reach the third-chunk paths; these tests do.
#include "omni/models/wan/autoencoder_kl_wan_blocks.h"

#include <gtest/gtest.h>

#include <functional>

#include "support/tensor_checks.h"

using namespace omni::models::wan;

using omni::testing::max_abs_diff;

namespace {

using ChunkFn = std::function<torch::Tensor(const torch::Tensor&, WanCausalCache&)>;

torch::Tensor run_chunks(const ChunkFn& fn, const torch::Tensor& x,
                         const std::vector<std::int64_t>& sizes, WanCausalCache& cache) {
  std::vector<torch::Tensor> outs;
  std::int64_t begin = 0;
  for (auto size : sizes) {
    cache.start_chunk();
    outs.push_back(fn(x.narrow(2, begin, size), cache));
    begin += size;
  }
  EXPECT_EQ(begin, x.size(2)) << "chunk sizes must cover the clip";
  return torch::cat(outs, 2);
}

torch::Tensor run_chunks(const ChunkFn& fn, const torch::Tensor& x,
                         const std::vector<std::int64_t>& sizes) {
  WanCausalCache cache;
  return run_chunks(fn, x, sizes, cache);
}

void randomize(torch::nn::Module& module, std::uint64_t seed) {
  torch::manual_seed(seed);
  torch::NoGradGuard no_grad;
  for (auto& p : module.parameters()) p.copy_(torch::randn_like(p) * 0.3);
  module.to(torch::kDouble);
}

torch::Tensor param(torch::nn::Module& module, const std::string& name) {
  return module.named_parameters()[name];
}

// Causal conv over the whole clip: two zero frames in front, spatial padding 1.
torch::Tensor full_causal_conv(const torch::Tensor& x, const torch::Tensor& weight,
                               const torch::Tensor& bias, std::int64_t spatial_padding) {
  auto shape = x.sizes().vec();
  shape[2] = 2;
  return torch::conv3d(torch::cat({torch::zeros(shape, x.options()), x}, 2), weight, bias, 1,
                       {0, spatial_padding, spatial_padding});
}

const std::vector<std::vector<std::int64_t>> kChunkings = {
    {1, 1, 1, 1, 1, 1, 1, 1, 1}, {1, 4, 4}, {1, 2, 1, 3, 1, 1}, {9}};

}  // namespace

TEST(WanCausalCache, ChunkedConvEqualsWholeClip) {
  torch::NoGradGuard no_grad;
  WanCausalConv3d conv(3, 4, Int3{3, 3, 3}, Int3{1, 1, 1}, Int3{1, 1, 1});
  randomize(*conv, 1);
  const auto x = torch::randn({2, 3, 9, 5, 6}, torch::kDouble);
  const auto expected = full_causal_conv(x, conv->weight, conv->bias, 1);
  for (const auto& sizes : kChunkings) {
    WanCausalCache cache;
    const auto out = run_chunks(
        [&](const torch::Tensor& c, WanCausalCache& k) { return run_cached(conv, c, k); }, x, sizes,
        cache);
    EXPECT_LE(max_abs_diff(out, expected), 1e-12) << "chunks of " << sizes.size();
    EXPECT_EQ(cache.size(), 1u);
  }
}

TEST(WanCausalCache, ChunkedResidualAndMidBlocksEqualWholeClip) {
  torch::NoGradGuard no_grad;
  auto residual = make_cached_block<WanResidualBlockImpl>(3, 5);
  randomize(*residual, 2);
  WanMidBlock mid(5);
  randomize(*mid, 3);
  const auto x = torch::randn({1, 3, 9, 4, 4}, torch::kDouble);
  const ChunkFn both = [&](const torch::Tensor& c, WanCausalCache& k) {
    return mid(residual(c, k), k);
  };
  const auto expected = run_chunks(both, x, {9});
  for (const auto& sizes : kChunkings) {
    WanCausalCache cache;
    EXPECT_LE(max_abs_diff(run_chunks(both, x, sizes, cache), expected), 1e-12)
        << "chunks of " << sizes.size();
    EXPECT_EQ(cache.size(), 6u);  // 2 convs × (1 residual + 2 in the mid block)
  }
}

// downsample3d: the first chunk keeps its frame (spatially downsampled, no time step);
// after it, an unpadded stride-2 time_conv runs over the clip from frame 0.
TEST(WanCausalCache, ChunkedTemporalDownsampleMatchesReference) {
  torch::NoGradGuard no_grad;
  auto down = make_cached_block<WanResampleImpl>(3, WanResampleMode::downsample3d, 1);
  randomize(*down, 4);
  const auto x = torch::randn({2, 3, 9, 6, 6}, torch::kDouble);
  // Spatial step frame by frame, then the time step.
  auto frames = x.permute({0, 2, 1, 3, 4}).reshape({18, 3, 6, 6});
  auto spatial =
      torch::conv2d(torch::constant_pad_nd(frames, {0, 1, 0, 1}, 0),
                    param(*down, "resample.1.weight"), param(*down, "resample.1.bias"), 2)
          .view({2, 9, 3, 3, 3})
          .permute({0, 2, 1, 3, 4});
  auto timed = torch::conv3d(spatial, param(*down, "time_conv.weight"),
                             param(*down, "time_conv.bias"), {2, 1, 1});
  const auto expected = torch::cat({spatial.narrow(2, 0, 1), timed}, 2);  // 1 + 4 frames
  const ChunkFn fn = [&](const torch::Tensor& c, WanCausalCache& k) { return down(c, k); };
  EXPECT_LE(max_abs_diff(run_chunks(fn, x, {1, 4, 4}), expected), 1e-12);
  EXPECT_LE(max_abs_diff(run_chunks(fn, x, {1, 2, 2, 2, 2}), expected), 1e-12);
}

// upsample3d: the first chunk passes one frame through (the "Rep" marker); every later
// frame becomes two, from a causal time_conv over frames 1.. (zero history), then the
// spatial ×2 and conv.
TEST(WanCausalCache, ChunkedTemporalUpsampleMatchesReference) {
  torch::NoGradGuard no_grad;
  auto up = make_cached_block<WanResampleImpl>(4, WanResampleMode::upsample3d, 2);
  randomize(*up, 5);
  const auto x = torch::randn({2, 4, 5, 3, 4}, torch::kDouble);
  auto later = full_causal_conv(x.narrow(2, 1, 4), param(*up, "time_conv.weight"),
                                param(*up, "time_conv.bias"), 0);  // [2, 8, 4, 3, 4]
  later = torch::stack({later.narrow(1, 0, 4), later.narrow(1, 4, 4)}, 3).reshape({2, 4, 8, 3, 4});
  const auto timed = torch::cat({x.narrow(2, 0, 1), later}, 2);  // 9 frames
  auto frames = timed.permute({0, 2, 1, 3, 4}).reshape({18, 4, 3, 4});
  frames = frames.repeat_interleave(2, 2).repeat_interleave(2, 3);
  const auto expected =
      torch::conv2d(frames, param(*up, "resample.1.weight"), param(*up, "resample.1.bias"), 1, 1)
          .view({2, 9, 2, 6, 8})
          .permute({0, 2, 1, 3, 4});
  const ChunkFn fn = [&](const torch::Tensor& c, WanCausalCache& k) { return up(c, k); };
  EXPECT_LE(max_abs_diff(run_chunks(fn, x, {1, 1, 1, 1, 1}), expected), 1e-12);
  EXPECT_LE(max_abs_diff(run_chunks(fn, x, {1, 2, 2}), expected), 1e-12);
  EXPECT_LE(max_abs_diff(run_chunks(fn, x, {1, 1, 3}), expected), 1e-12);
}

TEST(WanCausalCache, SpatialResamplersUseNoSlot) {
  torch::NoGradGuard no_grad;
  auto up = make_cached_block<WanResampleImpl>(4, WanResampleMode::upsample2d, 2);
  auto down = make_cached_block<WanResampleImpl>(2, WanResampleMode::downsample2d, 1);
  WanCausalCache cache;
  const auto y = down(up(torch::randn({1, 4, 3, 4, 4}), cache), cache);
  EXPECT_EQ(y.sizes(), (std::vector<std::int64_t>{1, 2, 3, 4, 4}));
  EXPECT_EQ(cache.size(), 0u);
}
