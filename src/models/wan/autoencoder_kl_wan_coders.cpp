// AutoencoderKLWan's WanEncoder3d and WanDecoder3d (Wan2.1 layout, not residual).
#include "omni/error.h"
#include "omni/models/wan/autoencoder_kl_wan.h"

namespace omni::models::wan {

namespace {
WanCausalConv3d conv3x3x3(std::int64_t in, std::int64_t out) {
  return WanCausalConv3d(in, out, Int3{3, 3, 3}, Int3{1, 1, 1}, Int3{1, 1, 1});
}
}  // namespace

WanEncoder3dImpl::WanEncoder3dImpl(const AutoencoderKLWanConfig& config) {
  OMNI_INTERNAL_ASSERT(!config.is_residual && config.attn_scales.empty(), "config not validated");
  const std::int64_t base = config.base_dim;
  const auto levels = config.dim_mult.size();
  conv_in_ = register_module("conv_in", conv3x3x3(config.in_channels, base));
  auto down_blocks = register_module("down_blocks", torch::nn::ModuleList());
  std::int64_t dim = base;
  for (std::size_t i = 0; i < levels; ++i) {
    const std::int64_t out = base * config.dim_mult[i];
    for (std::int64_t r = 0; r < config.num_res_blocks; ++r) {
      down_blocks_.push_back(make_cached_block<WanResidualBlockImpl>(dim, out));
      dim = out;
    }
    if (i != levels - 1)
      down_blocks_.push_back(make_cached_block<WanResampleImpl>(dim,
                                                                config.temperal_downsample[i]
                                                                    ? WanResampleMode::downsample3d
                                                                    : WanResampleMode::downsample2d,
                                                                dim / 2));
  }
  for (auto& block : down_blocks_) down_blocks->push_back(block.ptr());
  mid_block_ = register_module("mid_block", WanMidBlock(dim));
  norm_out_ = register_module("norm_out", WanRMSNorm(dim, /*images=*/false));
  conv_out_ = register_module("conv_out", conv3x3x3(dim, 2 * config.z_dim));
}

torch::Tensor WanEncoder3dImpl::forward(const torch::Tensor& x, WanCausalCache& cache) {
  auto h = run_cached(conv_in_, x, cache);
  for (auto& block : down_blocks_) h = block(h, cache);
  h = mid_block_(h, cache);
  return run_cached(conv_out_, torch::silu(norm_out_(h)), cache);
}

WanDecoder3dImpl::WanDecoder3dImpl(const AutoencoderKLWanConfig& config) {
  OMNI_INTERNAL_ASSERT(!config.is_residual, "config not validated");
  const std::int64_t base = config.decoder_dim();
  const auto& mult = config.dim_mult;
  const auto levels = mult.size();
  const auto temperal_upsample = config.temperal_upsample();
  std::int64_t dim = base * mult.back();
  conv_in_ = register_module("conv_in", conv3x3x3(config.z_dim, dim));
  mid_block_ = register_module("mid_block", WanMidBlock(dim));
  auto up_blocks = register_module("up_blocks", torch::nn::ModuleList());
  for (std::size_t i = 0; i < levels; ++i) {
    // Every stage after the first receives the previous upsampler's dim / 2 channels.
    const std::int64_t in = i == 0 ? dim : dim / 2;
    const std::int64_t out = base * mult[levels - 1 - i];
    std::optional<WanResampleMode> mode;
    if (i != levels - 1)
      mode = temperal_upsample[i] ? WanResampleMode::upsample3d : WanResampleMode::upsample2d;
    up_blocks_.emplace_back(in, out, config.num_res_blocks, mode);
    up_blocks->push_back(up_blocks_.back().ptr());
    dim = out;
  }
  norm_out_ = register_module("norm_out", WanRMSNorm(dim, /*images=*/false));
  conv_out_ = register_module("conv_out", conv3x3x3(dim, config.out_channels));
}

torch::Tensor WanDecoder3dImpl::forward(const torch::Tensor& x, WanCausalCache& cache) {
  auto h = run_cached(conv_in_, x, cache);
  h = mid_block_(h, cache);
  for (auto& block : up_blocks_) h = block(h, cache);
  return run_cached(conv_out_, torch::silu(norm_out_(h)), cache);
}

}  // namespace omni::models::wan
