// example:wan-shaped — a built-in synthetic pipeline with random weights and
// the roles and proportions of Wan2.2 T2V-A14B at a small scale: a text
// encoder (~0.4× an expert), two DiT experts switched at boundary 0.875, and a
// small VAE (~1% of an expert). It needs no files, so tests and benchmarks
// use it whenever no trained model is needed. Its pictures are noise-like.
#pragma once

#include "omni/pipelines/pipeline.h"

namespace omni::pipelines {

struct WanShapedConfig {
  int vocab = 1024;
  int text_dim = 128;
  int text_layers = 4;
  int max_tokens = 32;
  int latent_channels = 4;
  int dim = 128;
  int layers = 6;
  int vae_channels = 32;
  double boundary_ratio = 0.875;
  double shift = 12.0;
  std::uint64_t weight_seed = 20250101;
};

std::shared_ptr<Pipeline> make_wan_shaped_example(const WanShapedConfig& config = {});

}  // namespace omni::pipelines
