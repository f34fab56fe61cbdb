// AutoencoderKLWan blocks: residual block, resampler, attention, mid and up blocks.
#include <cmath>

#include "omni/error.h"
#include "omni/models/wan/autoencoder_kl_wan_blocks.h"

namespace omni::models::wan {

namespace {

// [B, C, T, H, W] → [B·T, C, H, W] and back: the 2-D layers work frame by frame.
torch::Tensor frames_to_batch(const torch::Tensor& x) {
  return x.permute({0, 2, 1, 3, 4})
      .reshape({x.size(0) * x.size(2), x.size(1), x.size(3), x.size(4)});
}

torch::Tensor batch_to_frames(const torch::Tensor& x, std::int64_t batch) {
  return x.view({batch, x.size(0) / batch, x.size(1), x.size(2), x.size(3)})
      .permute({0, 2, 1, 3, 4});
}

}  // namespace

WanResidualBlockImpl::WanResidualBlockImpl(std::int64_t in_dim, std::int64_t out_dim) {
  norm1_ = register_module("norm1", WanRMSNorm(in_dim, /*images=*/false));
  conv1_ = register_module(
      "conv1", WanCausalConv3d(in_dim, out_dim, Int3{3, 3, 3}, Int3{1, 1, 1}, Int3{1, 1, 1}));
  norm2_ = register_module("norm2", WanRMSNorm(out_dim, /*images=*/false));
  conv2_ = register_module(
      "conv2", WanCausalConv3d(out_dim, out_dim, Int3{3, 3, 3}, Int3{1, 1, 1}, Int3{1, 1, 1}));
  if (in_dim != out_dim)
    conv_shortcut_ =
        register_module("conv_shortcut", WanCausalConv3d(in_dim, out_dim, Int3{1, 1, 1}));
}

torch::Tensor WanResidualBlockImpl::forward(const torch::Tensor& x, WanCausalCache& cache) {
  const auto shortcut = conv_shortcut_ ? conv_shortcut_(x) : x;
  auto h = run_cached(conv1_, torch::silu(norm1_(x)), cache);
  // Dropout is the identity at inference.
  h = run_cached(conv2_, torch::silu(norm2_(h)), cache);
  return h + shortcut;
}

WanResampleImpl::WanResampleImpl(std::int64_t dim, WanResampleMode mode,
                                 std::int64_t upsample_out_dim)
    : mode_(mode) {
  // diffusers holds the 2-D conv at index 1 of an nn.Sequential named `resample`
  // (index 0 is the parameter-free upsample or zero-pad).
  auto resample = register_module("resample", std::make_shared<omni::nn::Module>());
  switch (mode) {
    case WanResampleMode::upsample2d:
    case WanResampleMode::upsample3d:
      conv_ = resample->register_module("1", WanConv2d(dim, upsample_out_dim, 3, 1, 1));
      break;
    case WanResampleMode::downsample2d:
    case WanResampleMode::downsample3d:
      conv_ = resample->register_module("1", WanConv2d(dim, dim, 3, 2, 0));
      break;
  }
  if (mode == WanResampleMode::upsample3d)
    time_conv_ = register_module(
        "time_conv", WanCausalConv3d(dim, 2 * dim, Int3{3, 1, 1}, Int3{1, 1, 1}, Int3{1, 0, 0}));
  if (mode == WanResampleMode::downsample3d)
    time_conv_ =
        register_module("time_conv", WanCausalConv3d(dim, dim, Int3{3, 1, 1}, Int3{2, 1, 1}));
}

torch::Tensor WanResampleImpl::upsample_time(const torch::Tensor& x, WanCausalCache& cache) {
  using State = WanCausalCache::SlotState;
  auto& slot = cache.claim();
  if (slot.state == State::empty) {  // first chunk: mark, pass through
    slot.state = State::first_chunk_marked;
    return x;
  }
  const std::int64_t frames = x.size(2);
  auto keep =
      x.narrow(2, std::max<std::int64_t>(0, frames - kCacheFrames), std::min(frames, kCacheFrames))
          .clone();
  torch::Tensor y;
  if (slot.state == State::first_chunk_marked) {
    if (keep.size(2) < kCacheFrames) keep = torch::cat({torch::zeros_like(keep), keep}, 2);
    y = time_conv_(x);
  } else {
    if (keep.size(2) < kCacheFrames)
      keep = torch::cat({slot.frames.narrow(2, slot.frames.size(2) - 1, 1).to(keep.device()), keep},
                        2);
    y = time_conv_(x, slot.frames);
  }
  slot.frames = std::move(keep);
  slot.state = State::frames;
  // time_conv gives 2·C channels: the first C are frame 2t, the last C frame 2t+1.
  const auto b = x.size(0), c = x.size(1), t = x.size(2), h = x.size(3), w = x.size(4);
  y = y.reshape({b, 2, c, t, h, w});
  return torch::stack({y.select(1, 0), y.select(1, 1)}, 3).reshape({b, c, 2 * t, h, w});
}

torch::Tensor WanResampleImpl::downsample_time(const torch::Tensor& x, WanCausalCache& cache) {
  using State = WanCausalCache::SlotState;
  auto& slot = cache.claim();
  OMNI_INTERNAL_ASSERT(slot.state != State::first_chunk_marked, "downsampler slot has a marker");
  if (slot.state == State::empty) {  // first chunk: keep it whole, no time step
    slot.frames = x.clone();
    slot.state = State::frames;
    return x;
  }
  auto keep = x.narrow(2, x.size(2) - 1, 1).clone();
  auto y = time_conv_(torch::cat({slot.frames.narrow(2, slot.frames.size(2) - 1, 1), x}, 2));
  slot.frames = std::move(keep);
  return y;
}

torch::Tensor WanResampleImpl::forward(const torch::Tensor& x, WanCausalCache& cache) {
  const auto batch = x.size(0);
  torch::Tensor h = mode_ == WanResampleMode::upsample3d ? upsample_time(x, cache) : x;
  h = frames_to_batch(h);
  switch (mode_) {
    case WanResampleMode::upsample2d:
    case WanResampleMode::upsample3d: {
      // nearest-exact ×2 is plain pixel repetition; diffusers does it in float32,
      // which copies values exactly in any dtype.
      const auto n = h.size(0), c = h.size(1), hh = h.size(2), ww = h.size(3);
      h = h.unsqueeze(3).unsqueeze(5).expand({n, c, hh, 2, ww, 2}).reshape({n, c, 2 * hh, 2 * ww});
      h = conv_(h);
      break;
    }
    case WanResampleMode::downsample2d:
    case WanResampleMode::downsample3d:
      h = conv_(torch::constant_pad_nd(h, {0, 1, 0, 1}, 0));  // ZeroPad2d((0, 1, 0, 1))
      break;
  }
  h = batch_to_frames(h, batch);
  return mode_ == WanResampleMode::downsample3d ? downsample_time(h, cache) : h;
}

WanAttentionBlockImpl::WanAttentionBlockImpl(std::int64_t dim) {
  norm_ = register_module("norm", WanRMSNorm(dim, /*images=*/true));
  to_qkv_ = register_module("to_qkv", WanConv2d(dim, 3 * dim, 1));
  proj_ = register_module("proj", WanConv2d(dim, dim, 1));
}

torch::Tensor WanAttentionBlockImpl::forward(const torch::Tensor& x) {
  const auto b = x.size(0), c = x.size(1), t = x.size(2), h = x.size(3), w = x.size(4);
  auto qkv = to_qkv_(norm_(frames_to_batch(x)));             // [B·T, 3C, H, W]
  qkv = qkv.reshape({b * t, 3 * c, h * w}).transpose(1, 2);  // [B·T, HW, 3C]
  auto chunks = qkv.chunk(3, -1);
  const auto& q = chunks[0];
  const auto& k = chunks[1];
  const auto& v = chunks[2];
  auto scores = torch::matmul(q, k.transpose(1, 2)) * (1.0 / std::sqrt(static_cast<double>(c)));
  // Reduced-precision scores are normalised in float32, as fused kernels do.
  const bool low_precision =
      scores.scalar_type() == torch::kHalf || scores.scalar_type() == torch::kBFloat16;
  auto weights = low_precision
                     ? torch::softmax(scores.to(torch::kFloat), -1).to(scores.scalar_type())
                     : torch::softmax(scores, -1);
  auto out = torch::matmul(weights, v);  // [B·T, HW, C]
  out = out.transpose(1, 2).reshape({b * t, c, h, w});
  out = proj_(out);
  return batch_to_frames(out, b) + x;
}

WanMidBlockImpl::WanMidBlockImpl(std::int64_t dim) {
  auto attentions = register_module("attentions", torch::nn::ModuleList());
  auto resnets = register_module("resnets", torch::nn::ModuleList());
  resnets_.push_back(make_cached_block<WanResidualBlockImpl>(dim, dim));
  attentions_.emplace_back(dim);
  resnets_.push_back(make_cached_block<WanResidualBlockImpl>(dim, dim));
  for (auto& a : attentions_) attentions->push_back(a.ptr());
  for (auto& r : resnets_) resnets->push_back(r.ptr());
}

torch::Tensor WanMidBlockImpl::forward(const torch::Tensor& x, WanCausalCache& cache) {
  auto h = resnets_[0](x, cache);
  for (std::size_t i = 0; i < attentions_.size(); ++i)
    h = resnets_[i + 1](attentions_[i](h), cache);
  return h;
}

WanUpBlockImpl::WanUpBlockImpl(std::int64_t in_dim, std::int64_t out_dim,
                               std::int64_t num_res_blocks,
                               std::optional<WanResampleMode> upsample_mode) {
  auto resnets = register_module("resnets", torch::nn::ModuleList());
  for (std::int64_t i = 0; i <= num_res_blocks; ++i) {
    resnets_.push_back(make_cached_block<WanResidualBlockImpl>(i == 0 ? in_dim : out_dim, out_dim));
    resnets->push_back(resnets_.back().ptr());
  }
  if (upsample_mode) {
    auto upsamplers = register_module("upsamplers", torch::nn::ModuleList());
    upsampler_ = make_cached_block<WanResampleImpl>(out_dim, *upsample_mode, out_dim / 2);
    upsamplers->push_back(upsampler_.ptr());
  }
}

torch::Tensor WanUpBlockImpl::forward(const torch::Tensor& x, WanCausalCache& cache) {
  auto h = x;
  for (auto& resnet : resnets_) h = resnet(h, cache);
  return upsampler_ ? upsampler_(h, cache) : h;
}

}  // namespace omni::models::wan
