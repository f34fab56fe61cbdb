// AutoencoderKLWan: module tree and the chunked encode / decode loops.
#include "omni/models/wan/autoencoder_kl_wan.h"

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

torch::Tensor AutoencoderKLWanImpl::decode(const torch::Tensor& z) {
  omni::nn::ForwardScope scope(*this);
  check_video_tensor(z, "latents", "[B, z_dim, T, h, w]", config_.z_dim);
  const auto& w = post_quant_conv_->weight;
  const auto x = post_quant_conv_(z.to(w.device(), w.scalar_type()));
  WanCausalCache cache;
  std::vector<torch::Tensor> frames;
  frames.reserve(x.size(2));
  for (std::int64_t t = 0; t < x.size(2); ++t) {
    cache.start_chunk();
    frames.push_back(decoder_(x.narrow(2, t, 1), cache));
  }
  return torch::cat(frames, 2).clamp(-1.0, 1.0);
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
  WanCausalCache cache;
  std::vector<torch::Tensor> chunks;
  for (std::int64_t begin = 0; begin < num_frames;) {
    const std::int64_t length = begin == 0 ? 1 : kEncodeChunkFrames;
    cache.start_chunk();
    chunks.push_back(encoder_(x.narrow(2, begin, length), cache));
    begin += length;
  }
  const auto moments = quant_conv_(torch::cat(chunks, 2));
  auto halves = moments.chunk(2, 1);
  return Encoded{halves[0], halves[1].clamp(-30.0, 20.0)};
}

}  // namespace omni::models::wan
