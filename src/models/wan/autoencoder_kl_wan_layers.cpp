// AutoencoderKLWan leaf layers: the causal cache, causal Conv3d, Conv2d, RMS norm.
#include <cmath>

#include "omni/error.h"
#include "omni/models/wan/autoencoder_kl_wan_blocks.h"

namespace omni::models::wan {

WanCausalCache::Slot& WanCausalCache::claim() {
  if (next_ == slots_.size()) slots_.emplace_back();
  OMNI_INTERNAL_ASSERT(next_ < slots_.size(), "cache cursor past its slots");
  return slots_[next_++];
}

// Weights start as zeros: they always come from a checkpoint, and zeros are cheap
// to make for a 127M-parameter model.
WanCausalConv3dImpl::WanCausalConv3dImpl(std::int64_t in_channels, std::int64_t out_channels,
                                         Int3 kernel, Int3 stride, Int3 padding)
    : stride_(stride), padding_(padding) {
  weight = register_parameter(
      "weight", torch::zeros({out_channels, in_channels, kernel[0], kernel[1], kernel[2]}));
  bias = register_parameter("bias", torch::zeros({out_channels}));
}

torch::Tensor WanCausalConv3dImpl::forward(const torch::Tensor& x, const torch::Tensor& cache) {
  // diffusers pads (w, w, h, h, 2·p_t, 0); the spatial part goes to conv3d itself.
  std::int64_t front = 2 * padding_[0];
  torch::Tensor input = x;
  if (cache.defined() && front > 0) {
    input = torch::cat({cache.to(x.device()), x}, 2);
    front -= cache.size(2);
  }
  OMNI_INTERNAL_ASSERT(front >= 0, "causal cache longer than the temporal padding");
  if (front > 0) {
    auto shape = input.sizes().vec();
    shape[2] = front;
    input = torch::cat({torch::zeros(shape, input.options()), input}, 2);
  }
  return torch::conv3d(input, weight, bias, {stride_[0], stride_[1], stride_[2]},
                       {0, padding_[1], padding_[2]});
}

torch::Tensor run_cached(WanCausalConv3d& conv, const torch::Tensor& x, WanCausalCache& cache) {
  auto& slot = cache.claim();
  OMNI_INTERNAL_ASSERT(slot.state != WanCausalCache::SlotState::first_chunk_marked,
                       "a convolution slot holds an upsampler's marker");
  const std::int64_t frames = x.size(2);
  // Clone: a view would keep the whole chunk's activation alive.
  torch::Tensor keep =
      x.narrow(2, std::max<std::int64_t>(0, frames - kCacheFrames), std::min(frames, kCacheFrames))
          .clone();
  if (keep.size(2) < kCacheFrames && slot.frames.defined())
    keep =
        torch::cat({slot.frames.narrow(2, slot.frames.size(2) - 1, 1).to(keep.device()), keep}, 2);
  auto out = conv(x, slot.frames);
  slot.frames = std::move(keep);
  slot.state = WanCausalCache::SlotState::frames;
  return out;
}

WanConv2dImpl::WanConv2dImpl(std::int64_t in_channels, std::int64_t out_channels,
                             std::int64_t kernel, std::int64_t stride, std::int64_t padding)
    : stride_(stride), padding_(padding) {
  weight = register_parameter("weight", torch::zeros({out_channels, in_channels, kernel, kernel}));
  bias = register_parameter("bias", torch::zeros({out_channels}));
}

torch::Tensor WanConv2dImpl::forward(const torch::Tensor& x) {
  return torch::conv2d(x, weight, bias, {stride_, stride_}, {padding_, padding_});
}

WanRMSNormImpl::WanRMSNormImpl(std::int64_t dim, bool images)
    : scale_(std::sqrt(static_cast<double>(dim))) {
  gamma =
      register_parameter("gamma", images ? torch::ones({dim, 1, 1}) : torch::ones({dim, 1, 1, 1}));
}

torch::Tensor WanRMSNormImpl::forward(const torch::Tensor& x) {
  const bool low_precision = x.scalar_type() == torch::kHalf || x.scalar_type() == torch::kBFloat16;
  const auto input = low_precision ? x.to(torch::kFloat) : x;
  // F.normalize(dim=1): x / max(‖x‖₂, 1e-12).
  const auto normalized = input / input.norm(2, {1}, /*keepdim=*/true).clamp_min(1e-12);
  return normalized.to(x.scalar_type()) * scale_ * gamma;
}

}  // namespace omni::models::wan
