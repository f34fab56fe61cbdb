// Note [Tiled VAE]: tiled decode and encode against the untiled ones on the
// fixtures' VAE (tests/data/wan/wan_vae), with the tolerance they meet.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "omni/error.h"
#include "omni/io/checkpoint.h"
#include "omni/models/wan/autoencoder_kl_wan.h"
#include "support/tensor_checks.h"

namespace fs = std::filesystem;
using omni::models::wan::AutoencoderKLWan;
using omni::models::wan::AutoencoderKLWanConfig;
using omni::models::wan::VaeTiling;

namespace {

AutoencoderKLWan fixture_vae_for_tiling() {
  const fs::path dir = fs::path(OMNI_TEST_DATA) / "wan/wan_vae";
  AutoencoderKLWan vae(AutoencoderKLWanConfig::from_file(dir / "config.json"));
  omni::io::load_state_dict(*vae, omni::io::Checkpoint::open_file(dir / "weights.safetensors"));
  return vae;
}

// Tiles of 64 pixels every 48 (8 and 6 latents): a 96 × 112 frame is 2 × 3
// tiles, with 16-pixel blends, as diffusers' 256/192 at a quarter of the size.
VaeTiling small_tiles(bool enabled = true) {
  VaeTiling t;
  t.enabled = enabled;
  t.tile_sample_min_height = t.tile_sample_min_width = 64;
  t.tile_sample_stride_height = t.tile_sample_stride_width = 48;
  return t;
}

// The fixture's VAE has random weights and a global attention in its
// decoder's middle block, so a tile that misses part of the frame changes
// every pixel a little, not only those near a seam: agreement improves with
// the tile's share of the frame. Measured here (random latents, one frame,
// 256 x 256): mean |tiled - untiled| 0.075 / 0.033 / 0.013 and max 0.71 /
// 0.50 / 0.34 with 64 / 128 / 192-pixel tiles (stride 3/4 of the tile), of
// an output range of 2. The stated tolerance, with headroom, is for
// diffusers' proportions (a 192-pixel tile is 3/4 of the frame, as 256 is
// of a 336-pixel one): mean 0.02, max 0.45. A misplaced tile or a missing
// blend is off by far more (mean > 0.3).
constexpr double kDecodeMeanTolerance = 0.02;
constexpr double kDecodeMaxTolerance = 0.45;
constexpr double kEncodeTolerance = 0.5;  // measured 0.40 (mean's max) with 64-pixel tiles

VaeTiling tiles_of(std::int64_t size) {
  VaeTiling t;
  t.enabled = true;
  t.tile_sample_min_height = t.tile_sample_min_width = size;
  t.tile_sample_stride_height = t.tile_sample_stride_width = size * 3 / 4;
  return t;
}

}  // namespace

TEST(VaeTiling, TiledDecodeAgreesWithUntiledWithinTheStatedTolerance) {
  torch::NoGradGuard no_grad;
  auto vae = fixture_vae_for_tiling();
  auto generator = at::detail::createCPUGenerator(5);
  const auto z = torch::randn({1, 4, 1, 32, 32}, generator, torch::kFloat32);
  const auto untiled = vae->decode(z);
  double previous_mean = 1e9;
  for (const std::int64_t size : {64, 128, 192}) {
    vae->set_tiling(tiles_of(size));
    const auto tiled = vae->decode(z);
    ASSERT_EQ(tiled.sizes(), untiled.sizes());
    const double max_diff = omni::testing::max_abs_diff(tiled, untiled);
    const double mean_diff = (tiled - untiled).abs().mean().item<double>();
    std::printf("tiled (%lld px tiles) vs untiled decode, 256x256: max %.4g, mean %.4g\n",
                static_cast<long long>(size), max_diff, mean_diff);
    EXPECT_GT(max_diff, 0.0) << "tiles see less context: not bitwise the same";
    EXPECT_LT(mean_diff, previous_mean) << "more context per tile, closer to untiled";
    previous_mean = mean_diff;
    if (size == 192) {
      EXPECT_LE(mean_diff, kDecodeMeanTolerance);
      EXPECT_LE(max_diff, kDecodeMaxTolerance);
    }
  }
  // 9 frames, 2 x 3 tiles: the causal cache runs per tile through time.
  const auto video_z = torch::randn({1, 4, 3, 12, 14}, generator, torch::kFloat32);
  const auto video_untiled = vae->decode(video_z);
  vae->set_tiling(small_tiles());
  const auto video_tiled = vae->decode(video_z);
  ASSERT_EQ(video_tiled.sizes(), video_untiled.sizes());
  EXPECT_LE((video_tiled - video_untiled).abs().mean().item<double>(), 0.15);  // measured 0.105
}

TEST(VaeTiling, TiledEncodeAgreesWithUntiledWithinTheStatedTolerance) {
  torch::NoGradGuard no_grad;
  auto vae = fixture_vae_for_tiling();
  auto generator = at::detail::createCPUGenerator(6);
  // A smooth video in [-1, 1] (an image-like input, not noise).
  const auto video = torch::tanh(torch::nn::functional::interpolate(
      torch::randn({1, 3, 5, 12, 14}, generator, torch::kFloat32) * 2,
      torch::nn::functional::InterpolateFuncOptions()
          .size(std::vector<std::int64_t>{5, 96, 112})
          .mode(torch::kTrilinear)
          .align_corners(false)));
  const auto untiled = vae->encode(video);
  vae->set_tiling(small_tiles());
  const auto tiled = vae->encode(video);
  ASSERT_EQ(tiled.mean.sizes(), untiled.mean.sizes());
  const double max_diff = omni::testing::max_abs_diff(tiled.mean, untiled.mean);
  std::printf("tiled vs untiled encode (96x112, 5 frames): mean max %.4g, logvar max %.4g\n",
              max_diff, omni::testing::max_abs_diff(tiled.logvar, untiled.logvar));
  EXPECT_LE(max_diff, kEncodeTolerance);
}

TEST(VaeTiling, OffOrNoLargerThanATileIsBitwiseTheUntiledPath) {
  torch::NoGradGuard no_grad;
  auto vae = fixture_vae_for_tiling();
  auto generator = at::detail::createCPUGenerator(7);
  const auto small = torch::randn({1, 4, 2, 8, 8}, generator, torch::kFloat32);  // 64 × 64
  const auto large = torch::randn({1, 4, 2, 12, 12}, generator, torch::kFloat32);
  const auto small_untiled = vae->decode(small);
  const auto large_untiled = vae->decode(large);
  vae->set_tiling(small_tiles(/*enabled=*/false));
  EXPECT_TRUE(torch::equal(vae->decode(large), large_untiled)) << "off";
  vae->set_tiling(small_tiles());
  EXPECT_TRUE(torch::equal(vae->decode(small), small_untiled)) << "one tile: not tiled";
  EXPECT_FALSE(torch::equal(vae->decode(large), large_untiled)) << "tiled above one tile";
}

TEST(VaeTiling, BadTilingIsAConfigError) {
  auto vae = fixture_vae_for_tiling();
  auto bad = small_tiles();
  bad.tile_sample_stride_width = 80;  // beyond the tile
  EXPECT_THROW(vae->set_tiling(bad), omni::ConfigError);
  bad = small_tiles();
  bad.tile_sample_min_height = 60;  // not a multiple of 8
  EXPECT_THROW(vae->set_tiling(bad), omni::ConfigError);
  bad = small_tiles();
  bad.tile_sample_stride_height = 0;
  EXPECT_THROW(vae->set_tiling(bad), omni::ConfigError);
}
