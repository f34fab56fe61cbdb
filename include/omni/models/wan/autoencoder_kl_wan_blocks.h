// Building blocks of AutoencoderKLWan (see autoencoder_kl_wan.h). Class and member
// names follow diffusers' autoencoder_kl_wan.py, so dotted parameter names match its
// state dict (`decoder.up_blocks.0.upsamplers.0.time_conv.weight`, ...). Blocks are
// called through their holders, so every block runs its forward pre-hooks.
#pragma once

#include <torch/types.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include <torch/nn/modules/container/modulelist.h>

#include "omni/nn/module.h"

namespace omni::models::wan {

// Note [Causal feature cache]
// The Wan VAE runs in time chunks (encode: 1, 4, 4, ... frames; decode: one latent
// frame at a time). Every causal convolution with temporal extent keeps the last
// kCacheFrames frames of the input it saw in the previous chunk and puts them in
// front of the next chunk instead of zero padding, so the chunked run equals a
// causal pass over the whole clip. A chunk claims slots in call order and every
// chunk makes the same calls, so slot i always belongs to the same convolution.
// Details that the reference gets a specific way and this port reproduces:
//  - When a chunk holds a single frame, the stored frames are the previous slot's
//    last frame followed by that frame, so two frames are kept whenever possible.
//  - Temporal upsampling (upsample3d) does not run its time_conv on the first
//    chunk: it only marks its slot (diffusers stores the string "Rep"), and the first
//    latent frame stays one frame. On the second chunk time_conv runs with zero
//    padding, and the frames kept are a zero frame followed by the chunk's frame.
//  - Temporal downsampling (downsample3d) stores the whole first chunk (after the
//    spatial step) and skips time_conv on it; later chunks prepend the last stored
//    frame to an unpadded stride-2 time_conv.
inline constexpr std::int64_t kCacheFrames = 2;  // diffusers' CACHE_T

class WanCausalCache {
 public:
  enum class SlotState { empty, first_chunk_marked, frames };
  struct Slot {
    SlotState state = SlotState::empty;
    torch::Tensor frames;  // defined iff state == frames
  };

  // Rewinds the slot cursor; call before each chunk.
  void start_chunk() { next_ = 0; }
  // The next slot in call order (created empty on the first chunk).
  Slot& claim();
  std::size_t size() const { return slots_.size(); }

 private:
  std::vector<Slot> slots_;
  std::size_t next_ = 0;
};

using Int3 = std::array<std::int64_t, 3>;

// A Conv3d with causal temporal padding (2·p_t frames in front, none behind) and
// symmetric spatial padding. `cache` (frames of the previous chunk) replaces as much
// of the temporal zero padding as it covers.
class WanCausalConv3dImpl : public omni::nn::Module {
 public:
  WanCausalConv3dImpl(std::int64_t in_channels, std::int64_t out_channels, Int3 kernel,
                      Int3 stride = {1, 1, 1}, Int3 padding = {0, 0, 0});
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cache = {});

  torch::Tensor weight, bias;

 private:
  Int3 stride_, padding_;
};
OMNI_MODULE(WanCausalConv3d);

// Runs `conv` (temporal kernel 3) on one chunk, consuming one cache slot.
torch::Tensor run_cached(WanCausalConv3d& conv, const torch::Tensor& x, WanCausalCache& cache);

// A plain Conv2d (weight [out, in, k, k], bias [out]).
class WanConv2dImpl : public omni::nn::Module {
 public:
  WanConv2dImpl(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel,
                std::int64_t stride = 1, std::int64_t padding = 0);
  torch::Tensor forward(const torch::Tensor& x);

  torch::Tensor weight, bias;

 private:
  std::int64_t stride_, padding_;
};
OMNI_MODULE(WanConv2d);

// diffusers' WanRMS_norm without bias: F.normalize over channels (dim 1), times
// sqrt(dim) and `gamma`. Half/bf16 inputs are normalised in float32. `gamma` is
// [dim, 1, 1] for images (4-D input) and [dim, 1, 1, 1] for video (5-D input).
class WanRMSNormImpl : public omni::nn::Module {
 public:
  WanRMSNormImpl(std::int64_t dim, bool images);
  torch::Tensor forward(const torch::Tensor& x);

  torch::Tensor gamma;

 private:
  double scale_;
};
OMNI_MODULE(WanRMSNorm);

// A block of an encoder/decoder stage that takes part in the causal cache.
class WanCachedBlockImpl : public omni::nn::Module {
 public:
  virtual torch::Tensor forward(const torch::Tensor& x, WanCausalCache& cache) = 0;
};
OMNI_MODULE(WanCachedBlock);

// A WanCachedBlock holding a new `Impl` (the holder's own forwarding constructor
// would try to build the abstract base).
template <typename Impl, typename... Args>
WanCachedBlock make_cached_block(Args&&... args) {
  return WanCachedBlock(
      std::shared_ptr<WanCachedBlockImpl>(std::make_shared<Impl>(std::forward<Args>(args)...)));
}

// norm1 → SiLU → conv1 → norm2 → SiLU → (dropout) → conv2, plus a 1×1×1
// conv_shortcut when the channel count changes.
class WanResidualBlockImpl : public WanCachedBlockImpl {
 public:
  WanResidualBlockImpl(std::int64_t in_dim, std::int64_t out_dim);
  torch::Tensor forward(const torch::Tensor& x, WanCausalCache& cache) override;

 private:
  WanRMSNorm norm1_{nullptr}, norm2_{nullptr};
  WanCausalConv3d conv1_{nullptr}, conv2_{nullptr}, conv_shortcut_{nullptr};
};

enum class WanResampleMode { upsample2d, upsample3d, downsample2d, downsample3d };

// Spatial ×2 up (nearest, then 3×3 conv to `upsample_out_dim`) or down (pad right and
// bottom by one, 3×3 stride-2 conv) applied frame by frame; the 3d modes add a
// temporal step through `time_conv` (see Note [Causal feature cache]).
class WanResampleImpl : public WanCachedBlockImpl {
 public:
  WanResampleImpl(std::int64_t dim, WanResampleMode mode, std::int64_t upsample_out_dim);
  torch::Tensor forward(const torch::Tensor& x, WanCausalCache& cache) override;

 private:
  torch::Tensor upsample_time(const torch::Tensor& x, WanCausalCache& cache);
  torch::Tensor downsample_time(const torch::Tensor& x, WanCausalCache& cache);

  WanResampleMode mode_;
  WanConv2d conv_{nullptr};  // registered as resample.1
  WanCausalConv3d time_conv_{nullptr};
};

// Single-head self-attention over the pixels of each frame (no temporal mixing, no
// cache): softmax(QKᵀ/sqrt(C))·V, written out because LibTorch 1.13 lacks SDPA.
class WanAttentionBlockImpl : public omni::nn::Module {
 public:
  explicit WanAttentionBlockImpl(std::int64_t dim);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  WanRMSNorm norm_{nullptr};
  WanConv2d to_qkv_{nullptr}, proj_{nullptr};
};
OMNI_MODULE(WanAttentionBlock);

// resnets.0 → attentions.0 → resnets.1.
class WanMidBlockImpl : public omni::nn::Module {
 public:
  explicit WanMidBlockImpl(std::int64_t dim);
  torch::Tensor forward(const torch::Tensor& x, WanCausalCache& cache);

 private:
  std::vector<WanAttentionBlock> attentions_;
  std::vector<WanCachedBlock> resnets_;
};
OMNI_MODULE(WanMidBlock);

// Decoder stage of the Wan2.1 VAE: num_res_blocks + 1 residual blocks, then an
// optional upsampler (upsamplers.0).
class WanUpBlockImpl : public omni::nn::Module {
 public:
  WanUpBlockImpl(std::int64_t in_dim, std::int64_t out_dim, std::int64_t num_res_blocks,
                 std::optional<WanResampleMode> upsample_mode);
  torch::Tensor forward(const torch::Tensor& x, WanCausalCache& cache);

 private:
  std::vector<WanCachedBlock> resnets_;
  WanCachedBlock upsampler_{nullptr};
};
OMNI_MODULE(WanUpBlock);

struct AutoencoderKLWanConfig;

// conv_in → down_blocks (residual blocks and resamplers) → mid_block → norm_out →
// SiLU → conv_out (2·z_dim channels). forward processes one time chunk.
class WanEncoder3dImpl : public omni::nn::Module {
 public:
  explicit WanEncoder3dImpl(const AutoencoderKLWanConfig& config);
  torch::Tensor forward(const torch::Tensor& x, WanCausalCache& cache);

 private:
  WanCausalConv3d conv_in_{nullptr}, conv_out_{nullptr};
  std::vector<WanCachedBlock> down_blocks_;
  WanMidBlock mid_block_{nullptr};
  WanRMSNorm norm_out_{nullptr};
};
OMNI_MODULE(WanEncoder3d);

// conv_in → mid_block → up_blocks → norm_out → SiLU → conv_out. forward processes
// one latent frame.
class WanDecoder3dImpl : public omni::nn::Module {
 public:
  explicit WanDecoder3dImpl(const AutoencoderKLWanConfig& config);
  torch::Tensor forward(const torch::Tensor& x, WanCausalCache& cache);

 private:
  WanCausalConv3d conv_in_{nullptr}, conv_out_{nullptr};
  WanMidBlock mid_block_{nullptr};
  std::vector<WanUpBlock> up_blocks_;
  WanRMSNorm norm_out_{nullptr};
};
OMNI_MODULE(WanDecoder3d);

}  // namespace omni::models::wan
