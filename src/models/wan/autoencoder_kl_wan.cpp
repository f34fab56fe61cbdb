// AutoencoderKLWan: module tree and the chunked encode / decode loops.
#include "omni/models/wan/autoencoder_kl_wan.h"

#include <algorithm>

#include "omni/cancel_point.h"
#include "omni/error.h"

namespace omni::models::wan {

namespace {

// diffusers' _encode hard-codes chunks of 1, then 4, 4, ... input frames.
constexpr std::int64_t kEncodeChunkFrames = 4;

void check_video_tensor(const torch::Tensor& x, const char* what, const char* layout,
                        std::int64_t channels) {
  OMNI_CHECK(x.defined() && x.dim() == 5, InvalidRequest, "AutoencoderKLWan: ", what,
             " must be a 5-D tensor ", layout, ", got ", x.defined() ? x.dim() : 0, " dims");
  OMNI_CHECK(x.size(1) == channels, InvalidRequest, "AutoencoderKLWan: ", what, " has ", x.size(1),
             " channels, the config needs ", channels);
  OMNI_CHECK(x.size(2) >= 1 && x.size(3) >= 1 && x.size(4) >= 1, InvalidRequest,
             "AutoencoderKLWan: ", what, " is empty");
}

}  // namespace

AutoencoderKLWanImpl::AutoencoderKLWanImpl(AutoencoderKLWanConfig config)
    : config_(std::move(config)) {
  config_.validate();
  const auto z = config_.z_dim;
  encoder_ = register_module("encoder", WanEncoder3d(config_));
  quant_conv_ = register_module("quant_conv", WanCausalConv3d(2 * z, 2 * z, Int3{1, 1, 1}));
  post_quant_conv_ = register_module("post_quant_conv", WanCausalConv3d(z, z, Int3{1, 1, 1}));
  decoder_ = register_module("decoder", WanDecoder3d(config_));
}

void VaeTiling::validate(std::int64_t compression) const {
  const std::pair<std::int64_t, std::int64_t> axes[] = {
      {tile_sample_min_height, tile_sample_stride_height},
      {tile_sample_min_width, tile_sample_stride_width}};
  for (const auto& [min, stride] : axes) {
    OMNI_CHECK(stride > 0 && stride <= min, ConfigError, "VAE tiling: stride ", stride,
               " must be in 1..", min, " (the tile size)");
    OMNI_CHECK(min % compression == 0 && stride % compression == 0, ConfigError,
               "VAE tiling: tile ", min, " and stride ", stride, " must be multiples of ",
               compression, " (the VAE's spatial compression)");
  }
}

void AutoencoderKLWanImpl::set_tiling(const VaeTiling& tiling) {
  tiling.validate(config_.spatial_compression());
  tiling_ = tiling;
}

torch::Tensor AutoencoderKLWanImpl::decode_untiled(const torch::Tensor& z) {
  const auto x = post_quant_conv_(z);
  WanCausalCache cache;
  std::vector<torch::Tensor> frames;
  frames.reserve(x.size(2));
  for (std::int64_t t = 0; t < x.size(2); ++t) {
    cancel_point();  // Note [Cancel points inside a step]
    cache.start_chunk();
    frames.push_back(decoder_(x.narrow(2, t, 1), cache));
  }
  return torch::cat(frames, 2);
}

torch::Tensor AutoencoderKLWanImpl::encode_moments(const torch::Tensor& x) {
  const auto num_frames = x.size(2);
  WanCausalCache cache;
  std::vector<torch::Tensor> chunks;
  for (std::int64_t begin = 0; begin < num_frames;) {
    const std::int64_t length = begin == 0 ? 1 : kEncodeChunkFrames;
    cancel_point();  // Note [Cancel points inside a step]
    cache.start_chunk();
    chunks.push_back(encoder_(x.narrow(2, begin, length), cache));
    begin += length;
  }
  return quant_conv_(torch::cat(chunks, 2));
}

namespace {

// Note [Tiled VAE]: the first `extent` rows (dim 3) or columns (dim 4) of
// `tile` become a linear mix of `previous`'s last `extent` and its own, the
// weight of `tile` growing from 0 to (extent-1)/extent across the overlap.
void blend_into(const torch::Tensor& previous, torch::Tensor& tile, std::int64_t dim,
                std::int64_t extent) {
  extent = std::min({previous.size(dim), tile.size(dim), extent});
  if (extent <= 0) return;
  std::vector<std::int64_t> shape(5, 1);
  shape[static_cast<std::size_t>(dim)] = extent;
  const auto w = (torch::arange(extent, tile.options().dtype(torch::kFloat)) / extent)
                     .to(tile.scalar_type())
                     .view(shape);
  const auto head = tile.narrow(dim, 0, extent);
  const auto tail = previous.narrow(dim, previous.size(dim) - extent, extent);
  head.copy_(tail * (1 - w) + head * w);
}

// Tiles of `size` every `stride` along `length`, blended over size − stride
// and cut to `stride` (then to `out_length`): shared by decode and encode.
struct TileGrid {
  std::int64_t size_h, size_w, stride_h, stride_w;  // in the input's units
  std::int64_t blend_h, blend_w, keep_h, keep_w;    // in the output's units
};

template <typename Run>
torch::Tensor run_tiled(const torch::Tensor& x, const TileGrid& g, std::int64_t out_h,
                        std::int64_t out_w, Run&& run) {
  std::vector<std::vector<torch::Tensor>> rows;
  for (std::int64_t i = 0; i < x.size(3); i += g.stride_h) {
    auto& row = rows.emplace_back();
    for (std::int64_t j = 0; j < x.size(4); j += g.stride_w) {
      cancel_point();  // Note [Cancel points inside a step]
      row.push_back(run(x.narrow(3, i, std::min(g.size_h, x.size(3) - i))
                            .narrow(4, j, std::min(g.size_w, x.size(4) - j))));
    }
  }
  std::vector<torch::Tensor> kept_rows;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    std::vector<torch::Tensor> kept;
    for (std::size_t j = 0; j < rows[i].size(); ++j) {
      auto& tile = rows[i][j];  // blended in place: later tiles blend with it
      if (i > 0) blend_into(rows[i - 1][j], tile, 3, g.blend_h);
      if (j > 0) blend_into(rows[i][j - 1], tile, 4, g.blend_w);
      kept.push_back(tile.narrow(3, 0, std::min(g.keep_h, tile.size(3)))
                         .narrow(4, 0, std::min(g.keep_w, tile.size(4))));
    }
    kept_rows.push_back(torch::cat(kept, 4));
  }
  const auto out = torch::cat(kept_rows, 3);
  return out.narrow(3, 0, std::min(out_h, out.size(3))).narrow(4, 0, std::min(out_w, out.size(4)));
}

}  // namespace

torch::Tensor AutoencoderKLWanImpl::tiled_decode(const torch::Tensor& z) {
  const auto s = config_.spatial_compression();
  const auto& t = tiling_;
  const TileGrid grid{t.tile_sample_min_height / s,
                      t.tile_sample_min_width / s,
                      t.tile_sample_stride_height / s,
                      t.tile_sample_stride_width / s,
                      t.tile_sample_min_height - t.tile_sample_stride_height,
                      t.tile_sample_min_width - t.tile_sample_stride_width,
                      t.tile_sample_stride_height,
                      t.tile_sample_stride_width};
  return run_tiled(z, grid, z.size(3) * s, z.size(4) * s,
                   [&](const torch::Tensor& tile) { return decode_untiled(tile); });
}

torch::Tensor AutoencoderKLWanImpl::tiled_encode(const torch::Tensor& x) {
  const auto s = config_.spatial_compression();
  const auto& t = tiling_;
  const TileGrid grid{t.tile_sample_min_height,
                      t.tile_sample_min_width,
                      t.tile_sample_stride_height,
                      t.tile_sample_stride_width,
                      (t.tile_sample_min_height - t.tile_sample_stride_height) / s,
                      (t.tile_sample_min_width - t.tile_sample_stride_width) / s,
                      t.tile_sample_stride_height / s,
                      t.tile_sample_stride_width / s};
  return run_tiled(x, grid, x.size(3) / s, x.size(4) / s,
                   [&](const torch::Tensor& tile) { return encode_moments(tile); });
}

torch::Tensor AutoencoderKLWanImpl::decode(const torch::Tensor& z) {
  omni::nn::ForwardScope scope(*this);
  check_video_tensor(z, "latents", "[B, z_dim, T, h, w]", config_.z_dim);
  const auto& w = post_quant_conv_->weight;
  const auto latents = z.to(w.device(), w.scalar_type());
  const auto s = config_.spatial_compression();
  const bool tiled = tiling_.enabled && (latents.size(3) * s > tiling_.tile_sample_min_height ||
                                         latents.size(4) * s > tiling_.tile_sample_min_width);
  return (tiled ? tiled_decode(latents) : decode_untiled(latents)).clamp(-1.0, 1.0);
}

AutoencoderKLWanImpl::Encoded AutoencoderKLWanImpl::encode(const torch::Tensor& video) {
  omni::nn::ForwardScope scope(*this);
  check_video_tensor(video, "video", "[B, C, F, H, W]", config_.in_channels);
  const auto num_frames = video.size(2);
  OMNI_CHECK((num_frames - 1) % kEncodeChunkFrames == 0, InvalidRequest,
             "AutoencoderKLWan: video has ", num_frames, " frames; encode needs 1 + ",
             kEncodeChunkFrames, "·k (diffusers would silently drop the last ",
             (num_frames - 1) % kEncodeChunkFrames, ")");
  const auto& w = quant_conv_->weight;
  const auto x = video.to(w.device(), w.scalar_type());
  const bool tiled = tiling_.enabled && (x.size(3) > tiling_.tile_sample_min_height ||
                                         x.size(4) > tiling_.tile_sample_min_width);
  const auto moments = tiled ? tiled_encode(x) : encode_moments(x);
  auto halves = moments.chunk(2, 1);
  return Encoded{halves[0], halves[1].clamp(-30.0, 20.0)};
}

}  // namespace omni::models::wan
