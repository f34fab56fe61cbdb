// WanRotaryPosEmbed and the rotation it feeds (transformer_wan.py's
// apply_rotary_emb inside WanAttnProcessor).
#include <torch/torch.h>

#include <vector>

#include "omni/error.h"
#include "omni/models/wan/wan_transformer_layers.h"

namespace omni::models::wan {

namespace {

// get_1d_rotary_pos_embed(dim, max_seq_len, theta, use_real=True,
// repeat_interleave_real=True, freqs_dtype=float64): angles in float64, cos/sin
// each repeated twice along the channel axis, rounded to float32.
std::pair<torch::Tensor, torch::Tensor> axis_tables(std::int64_t dim, std::int64_t max_seq_len,
                                                    double theta) {
  const auto exponents = torch::arange(0, dim, 2, torch::kFloat64) / static_cast<double>(dim);
  const auto inv_freq = 1.0 / torch::pow(theta, exponents);
  const auto positions = torch::arange(max_seq_len, torch::kFloat64);
  const auto angles = torch::outer(positions, inv_freq);  // [S, dim/2]
  return {angles.cos().repeat_interleave(2, 1).to(torch::kFloat),
          angles.sin().repeat_interleave(2, 1).to(torch::kFloat)};
}

}  // namespace

WanRotaryPosEmbedImpl::WanRotaryPosEmbedImpl(std::int64_t attention_head_dim,
                                             std::array<std::int64_t, 3> patch_size,
                                             std::int64_t max_seq_len, double theta)
    : patch_size_(patch_size), max_seq_len_(max_seq_len) {
  const std::int64_t hw = 2 * (attention_head_dim / 6);
  split_ = {attention_head_dim - 2 * hw, hw, hw};
  std::vector<torch::Tensor> cos, sin;
  for (const auto dim : split_) {
    auto [c, s] = axis_tables(dim, max_seq_len, theta);
    cos.push_back(c);
    sin.push_back(s);
  }
  freqs_cos = register_buffer("freqs_cos", torch::cat(cos, 1));
  freqs_sin = register_buffer("freqs_sin", torch::cat(sin, 1));
}

RotaryEmbedding WanRotaryPosEmbedImpl::forward(c10::IntArrayRef latent_shape) {
  OMNI_INTERNAL_ASSERT(latent_shape.size() == 5, "rope expects a [B, C, F, H, W] shape");
  const std::array<std::int64_t, 3> grid = {latent_shape[2] / patch_size_[0],
                                            latent_shape[3] / patch_size_[1],
                                            latent_shape[4] / patch_size_[2]};
  static constexpr const char* kAxis[] = {"frames", "height", "width"};
  for (int a = 0; a < 3; ++a)
    OMNI_CHECK(grid[a] <= max_seq_len_, InvalidRequest, "WanTransformer3DModel: ", grid[a],
               " patches along ", kAxis[a], " exceed rope_max_seq_len ", max_seq_len_);

  // Keep only the distinct angle of each channel pair: even entries of cos,
  // odd entries of sin, as the reference processor reads them.
  auto pick = [&](const torch::Tensor& table, std::int64_t parity) {
    auto parts = table.split_with_sizes({split_[0], split_[1], split_[2]}, 1);
    const auto f = parts[0].narrow(0, 0, grid[0]).reshape({grid[0], 1, 1, -1});
    const auto h = parts[1].narrow(0, 0, grid[1]).reshape({1, grid[1], 1, -1});
    const auto w = parts[2].narrow(0, 0, grid[2]).reshape({1, 1, grid[2], -1});
    const std::vector<std::int64_t> full = {grid[0], grid[1], grid[2], -1};
    auto joined = torch::cat({f.expand(full), h.expand(full), w.expand(full)}, -1);
    joined = joined.reshape({1, grid[0] * grid[1] * grid[2], 1, -1});
    return joined.slice(-1, parity, c10::nullopt, 2).contiguous();
  };
  return {pick(freqs_cos, 0), pick(freqs_sin, 1)};
}

torch::Tensor apply_rotary_embedding(const torch::Tensor& x, const RotaryEmbedding& rope) {
  const auto sizes = x.sizes();
  const auto pairs = x.reshape({sizes[0], sizes[1], sizes[2], sizes[3] / 2, 2});
  const auto x1 = pairs.select(-1, 0);
  const auto x2 = pairs.select(-1, 1);
  const auto even = x1 * rope.cos - x2 * rope.sin;
  const auto odd = x1 * rope.sin + x2 * rope.cos;
  return torch::stack({even, odd}, -1).reshape(sizes).to(x.scalar_type());
}

}  // namespace omni::models::wan
