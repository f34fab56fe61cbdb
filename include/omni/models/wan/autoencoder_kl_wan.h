// AutoencoderKLWan: the causal 3D video VAE of Wan2.1 / Wan2.2-A14B, ported from
// diffusers (models/autoencoders/autoencoder_kl_wan.py) with identical module and
// parameter names, so a diffusers `vae/` folder loads with omni::io::load_state_dict.
//
// Usage:
//   auto config = AutoencoderKLWanConfig::from_file(dir / "config.json");
//   AutoencoderKLWan vae(config);
//   omni::io::load_state_dict(*vae, omni::io::Checkpoint::open_dir(dir));
//   auto video = vae->decode(latents);          // [B, z, T, h, w] -> [B, 3, 1+4(T-1), 8h, 8w]
//   auto posterior = vae->encode(video);        // mean / logvar, [B, z, T, h, w]
//
// Both entry points run synchronously on the calling thread, in the weights' dtype
// and on the weights' device; they keep no state between calls (the causal feature
// cache lives on the stack of each call), so one module may serve several threads.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "omni/models/wan/autoencoder_kl_wan_blocks.h"
#include "omni/nn/module.h"

namespace omni::models::wan {

// The fields of diffusers' AutoencoderKLWan.__init__ (config.json), with its defaults.
struct AutoencoderKLWanConfig {
  std::int64_t base_dim = 96;                                   // required in config.json
  std::optional<std::int64_t> decoder_base_dim;                 // null: base_dim
  std::int64_t z_dim = 16;                                      // required
  std::vector<std::int64_t> dim_mult = {1, 2, 4, 4};            // required
  std::int64_t num_res_blocks = 2;                              // required
  std::vector<double> attn_scales;                              // only [] is supported
  std::vector<bool> temperal_downsample = {false, true, true};  // required; diffusers' spelling
  double dropout = 0.0;                                         // inference only: never applied
  // Per-channel latent statistics (z_dim values each). Config fields only: encode and
  // decode never use them; pipelines un-normalise with latents / (1/std) + mean.
  std::vector<double> latents_mean;  // default: diffusers' 16 values
  std::vector<double> latents_std;
  bool is_residual = false;  // Wan2.2 TI2V VAE: not implemented
  std::int64_t in_channels = 3;
  std::int64_t out_channels = 3;
  std::optional<std::int64_t> patch_size;  // only null (or 1) is supported
  std::optional<std::int64_t> scale_factor_temporal = 4;
  std::optional<std::int64_t> scale_factor_spatial = 8;
  // Written by diffusers' convert_wan_to_diffusers.py for the Wan2.2 VAE but not an
  // __init__ argument: diffusers ignores it and always clamps decoded output to
  // [-1, 1]; so does this port.
  std::optional<bool> clip_output;

  AutoencoderKLWanConfig();

  // Strict parse: unknown fields, missing required fields and wrong types are
  // ConfigErrors naming the field and `source`. Calls validate().
  static AutoencoderKLWanConfig from_json(const nlohmann::json& json, const std::string& source);
  static AutoencoderKLWanConfig from_file(const std::filesystem::path& config_json);

  // ConfigError naming the field for values that cannot work or are not implemented.
  void validate() const;

  std::int64_t decoder_dim() const { return decoder_base_dim.value_or(base_dim); }
  // The decoder's temporal upsampling flags: temperal_downsample reversed.
  std::vector<bool> temperal_upsample() const;
  // Pixels per latent along H/W (2^(levels-1)) and frames per latent after the first
  // (2^(temporal downsamplings)), as implied by the architecture.
  std::int64_t spatial_compression() const;
  std::int64_t temporal_compression() const;
};

// Note [Tiled VAE]
// A 720p × 81-frame decode holds the decoder's activations for whole frames
// (96–384 channels at up to 1280 × 720): gigabytes that grow with the frame.
// Tiled, as diffusers' AutoencoderKLWan.enable_tiling, the frame is cut into
// overlapping tiles of tile_sample_min pixels every tile_sample_stride pixels
// (256 and 192 by default; in latents ÷ 8), each tile is decoded (or
// encoded) on its own through every frame with its own causal cache, and
// each tile is blended into the one above and the one to its left over the
// overlap with linear weights before the stride-sized part of it is kept.
// The workspace is then that of one tile. Frames no larger than one tile
// are not tiled, so `enabled` changes nothing below tile_sample_min.
// Tiled output is not bitwise the untiled output: near a seam the tile saw
// less context. How close they are on the fixtures' VAE is measured in
// tests/models/autoencoder_kl_wan_tiling_test.cpp.
struct VaeTiling {
  bool enabled = false;
  std::int64_t tile_sample_min_height = 256;
  std::int64_t tile_sample_min_width = 256;
  std::int64_t tile_sample_stride_height = 192;
  std::int64_t tile_sample_stride_width = 192;
  // ConfigError unless 0 < stride ≤ min and both are multiples of `compression`.
  void validate(std::int64_t compression) const;
};

class AutoencoderKLWanImpl : public omni::nn::Module {
 public:
  // Builds the module tree with zero-filled weights (load a checkpoint next).
  // Validates the config first.
  explicit AutoencoderKLWanImpl(AutoencoderKLWanConfig config);

  // The posterior of encode: a diagonal Gaussian. mean is also its mode.
  struct Encoded {
    torch::Tensor mean;
    torch::Tensor logvar;  // clamped to [-30, 20], as diffusers does
  };

  // Decodes latents [B, z_dim, T, h, w] one latent frame at a time with the causal
  // feature cache: the first frame gives 1 video frame, each later one
  // temporal_compression() frames. Returns [B, out_channels, F, H, W] clamped to
  // [-1, 1], in the weights' dtype. `z` is converted to the weights' device and dtype.
  // Runs the forward pre-hooks first (design.md §2 rule 9). Records autograd when
  // grad mode is on and the weights require grad (the trainer in tools/train);
  // inference callers run under NoGradGuard / InferenceMode, and loaded pipelines
  // freeze their weights. InvalidRequest on a bad shape.
  torch::Tensor decode(const torch::Tensor& z);

  // Encodes video [B, in_channels, F, H, W] (values in [-1, 1]) in frame chunks of
  // 1, 4, 4, ... with the causal feature cache. F must be 1 + 4k (diffusers would drop
  // the remainder silently; this port refuses with InvalidRequest). Returns mean and
  // logvar [B, z_dim, 1 + k·4/temporal_compression(), H/s, W/s], s =
  // spatial_compression(), in the weights' dtype. Hooks and conversions as for decode.
  Encoded encode(const torch::Tensor& video);

  const AutoencoderKLWanConfig& config() const { return config_; }
  // Note [Tiled VAE]; off until set. ConfigError for a bad tiling. Set
  // before serving (not while another thread decodes).
  void set_tiling(const VaeTiling& tiling);
  const VaeTiling& tiling() const { return tiling_; }

  // The number of parameters the config implies, counted arithmetically from the
  // architecture (no module is built). Validates the config.
  static std::int64_t parameter_count(const AutoencoderKLWanConfig& config);

 private:
  // The untiled paths: decoded frames before the clamp, and encode's moments.
  torch::Tensor decode_untiled(const torch::Tensor& z);
  torch::Tensor encode_moments(const torch::Tensor& x);
  torch::Tensor tiled_decode(const torch::Tensor& z);
  torch::Tensor tiled_encode(const torch::Tensor& x);

  AutoencoderKLWanConfig config_;
  VaeTiling tiling_;
  WanEncoder3d encoder_{nullptr};
  WanCausalConv3d quant_conv_{nullptr};
  WanCausalConv3d post_quant_conv_{nullptr};
  WanDecoder3d decoder_{nullptr};
};
OMNI_MODULE(AutoencoderKLWan);

}  // namespace omni::models::wan
