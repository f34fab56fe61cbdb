#include "omni/pipelines/wan_shaped_example.h"

#include <cmath>

#include "omni/cancel_point.h"
#include "omni/error.h"
#include "omni/pipelines/prompt_cache.h"
#include "omni/pipelines/wan_video_stages.h"

namespace omni::pipelines {

namespace {

namespace tnn = torch::nn;

// Token ids from the prompt's bytes: deterministic, no tokenizer needed.
torch::Tensor tokenize(const std::string& text, int vocab, int max_tokens) {
  std::vector<std::int64_t> ids;
  ids.push_back(1);
  for (unsigned char ch : text) {
    if (static_cast<int>(ids.size()) >= max_tokens) break;
    ids.push_back(2 + (ch * 131 + static_cast<int>(ids.size()) * 7) % (vocab - 2));
  }
  while (static_cast<int>(ids.size()) < max_tokens) ids.push_back(0);
  return torch::tensor(ids, torch::kInt64).unsqueeze(0);
}

torch::Tensor timestep_features(const torch::Tensor& t, int dim) {
  const int half = dim / 2;
  auto freqs = torch::exp(-std::log(10000.0) *
                          torch::arange(half, t.options().dtype(torch::kFloat32)) / half);
  auto args = t.to(torch::kFloat32).unsqueeze(1) * freqs.unsqueeze(0);
  return torch::cat({torch::cos(args), torch::sin(args)}, 1);
}

class TextLayerImpl : public nn::Module {
 public:
  explicit TextLayerImpl(int dim) {
    fc1 = register_module("fc1", tnn::Linear(dim, 2 * dim));
    fc2 = register_module("fc2", tnn::Linear(2 * dim, dim));
  }
  torch::Tensor forward(const torch::Tensor& x) { return x + fc2(torch::gelu(fc1(x))); }
  tnn::Linear fc1{nullptr}, fc2{nullptr};
};
OMNI_MODULE(TextLayer);

class TextEncoderImpl : public nn::Module {
 public:
  explicit TextEncoderImpl(const WanShapedConfig& c) {
    embed = register_module("embed", tnn::Embedding(c.vocab, c.text_dim));
    layers = register_module("layers", tnn::ModuleList());
    for (int i = 0; i < c.text_layers; ++i) {
      layer_list.emplace_back(c.text_dim);
      layers->push_back(layer_list.back().ptr());
    }
  }
  torch::Tensor forward(const torch::Tensor& ids) {
    auto x = embed(ids);
    for (auto& layer : layer_list) {
      cancel_point();  // Note [Cancel points inside a step]
      x = layer(x);
    }
    return x * (ids != 0).unsqueeze(-1).to(x.scalar_type());  // zero the padding, as Wan does
  }
  tnn::Embedding embed{nullptr};
  tnn::ModuleList layers{nullptr};
  std::vector<TextLayer> layer_list;
};
OMNI_MODULE(TextEncoder);

class DiTBlockImpl : public nn::Module {
 public:
  explicit DiTBlockImpl(int dim) {
    norm = register_module("norm",
                           tnn::LayerNorm(tnn::LayerNormOptions({dim}).elementwise_affine(false)));
    modulation = register_module("modulation", tnn::Linear(dim, 3 * dim));
    fc1 = register_module("fc1", tnn::Linear(dim, 3 * dim));
    fc2 = register_module("fc2", tnn::Linear(3 * dim, dim));
  }
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cond) {
    auto mod = modulation(torch::silu(cond)).unsqueeze(1).chunk(3, -1);
    auto h = norm(x) * (1 + mod[0]) + mod[1];
    return x + mod[2] * fc2(torch::gelu(fc1(h)));
  }
  tnn::LayerNorm norm{nullptr};
  tnn::Linear modulation{nullptr}, fc1{nullptr}, fc2{nullptr};
};
OMNI_MODULE(DiTBlock);

class DiTImpl : public nn::Module {
 public:
  explicit DiTImpl(const WanShapedConfig& c) : dim_(c.dim) {
    patch_embedding = register_module("patch_embedding", tnn::Linear(c.latent_channels, c.dim));
    time_embedding = register_module("time_embedding", tnn::Linear(c.dim, c.dim));
    text_embedding = register_module("text_embedding", tnn::Linear(c.text_dim, c.dim));
    blocks = register_module("blocks", tnn::ModuleList());
    for (int i = 0; i < c.layers; ++i) {
      block_list.emplace_back(c.dim);
      blocks->push_back(block_list.back().ptr());
    }
    proj_out = register_module("proj_out", tnn::Linear(c.dim, c.latent_channels));
  }
  // latents [B, C, F, H, W], t [B], text [B, L, text_dim] → velocity like latents.
  torch::Tensor forward(const torch::Tensor& latents, const torch::Tensor& t,
                        const torch::Tensor& text) {
    const auto shape = latents.sizes().vec();
    auto tokens = latents.flatten(2).transpose(1, 2);  // [B, N, C]
    auto x = patch_embedding(tokens);
    auto cond = time_embedding(timestep_features(t, dim_).to(x.scalar_type())) +
                text_embedding(text.mean(1));
    for (auto& block : block_list) {
      cancel_point();  // Note [Cancel points inside a step]
      x = block(x, cond);
    }
    return proj_out(x).transpose(1, 2).reshape(shape);
  }
  int dim_;
  tnn::Linear patch_embedding{nullptr}, time_embedding{nullptr}, text_embedding{nullptr},
      proj_out{nullptr};
  tnn::ModuleList blocks{nullptr};
  std::vector<DiTBlock> block_list;
};
OMNI_MODULE(DiT);

class VaeImpl : public nn::Module {
 public:
  explicit VaeImpl(const WanShapedConfig& c) {
    conv_in = register_module(
        "conv_in",
        tnn::Conv2d(tnn::Conv2dOptions(c.latent_channels, c.vae_channels, 3).padding(1)));
    conv_mid = register_module(
        "conv_mid", tnn::Conv2d(tnn::Conv2dOptions(c.vae_channels, c.vae_channels, 3).padding(1)));
    conv_out = register_module("conv_out",
                               tnn::Conv2d(tnn::Conv2dOptions(c.vae_channels, 3, 3).padding(1)));
  }
  // latents [B, C, f, h, w] → video in [-1, 1], [B, 3, F, 8h, 8w] with F = 4(f-1)+1.
  torch::Tensor decode(const torch::Tensor& latents) {
    nn::ForwardScope scope(*this);
    const auto b = latents.size(0), f = latents.size(2);
    auto frames = latents.permute({0, 2, 1, 3, 4}).flatten(0, 1);  // [B·f, C, h, w]
    auto x = torch::silu(conv_in(frames));
    namespace F = torch::nn::functional;
    x = F::interpolate(x, F::InterpolateFuncOptions()
                              .size(std::vector<int64_t>{8 * x.size(2), 8 * x.size(3)})
                              .mode(torch::kNearest));
    x = torch::tanh(conv_out(torch::silu(conv_mid(x))));
    x = x.reshape({b, f, 3, x.size(2), x.size(3)}).permute({0, 2, 1, 3, 4});
    if (f == 1) return x;
    const auto out_frames = 4 * (f - 1) + 1;
    return F::interpolate(x, F::InterpolateFuncOptions()
                                 .size(std::vector<int64_t>{out_frames, x.size(3), x.size(4)})
                                 .mode(torch::kTrilinear)
                                 .align_corners(true));
  }
  torch::Tensor forward(const torch::Tensor& latents) { return decode(latents); }
  tnn::Conv2d conv_in{nullptr}, conv_mid{nullptr}, conv_out{nullptr};
};
OMNI_MODULE(Vae);

class WanShapedPipeline final : public Pipeline {
 public:
  explicit WanShapedPipeline(const WanShapedConfig& config) : config_(config) {
    torch::manual_seed(config.weight_seed);
    text_encoder = register_module("text_encoder", TextEncoder(config).ptr());
    transformer = register_module("transformer", DiT(config).ptr());
    transformer_2 = register_module("transformer_2", DiT(config).ptr());
    vae = register_module("vae", Vae(config).ptr());
    for (auto& p : parameters()) p.set_requires_grad(false);
  }

  std::string class_name() const override { return "example:wan-shaped"; }

  offload::ComponentSpec components() const override {
    return {.dit_modules = {"transformer", "transformer_2"},
            .encoder_modules = {"text_encoder"},
            .vae_modules = {"vae"},
            .resident_modules = {}};
  }

  GenerationRequest resolve(const GenerationRequest& in) const override {
    GenerationRequest r = in;
    if (!r.steps) r.steps = 8;
    if (!r.width) r.width = 64;
    if (!r.height) r.height = 64;
    if (!r.num_frames) r.num_frames = 5;
    if (!r.guidance_scale) r.guidance_scale = 4.0;
    if (!r.guidance_scale_2) r.guidance_scale_2 = 3.0;
    if (!r.fps) r.fps = 16;
    OMNI_CHECK(!r.prompt.empty(), InvalidRequest, "prompt must not be empty");
    OMNI_CHECK(!r.boundary_ratio && !r.flow_shift, InvalidRequest,
               "boundary_ratio and flow_shift: example:wan-shaped has a fixed schedule; omit them "
               "(a diffusers WanPipeline directory takes them)");
    OMNI_CHECK(*r.steps >= 1 && *r.steps <= 1000, InvalidRequest, "steps must be in 1..1000, got ",
               *r.steps);
    OMNI_CHECK(*r.width >= 16 && *r.width % 16 == 0 && *r.width <= 4096, InvalidRequest,
               "width must be a multiple of 16 in 16..4096, got ", *r.width);
    OMNI_CHECK(*r.height >= 16 && *r.height % 16 == 0 && *r.height <= 4096, InvalidRequest,
               "height must be a multiple of 16 in 16..4096, got ", *r.height);
    OMNI_CHECK(*r.num_frames >= 1 && (*r.num_frames - 1) % 4 == 0 && *r.num_frames <= 1001,
               InvalidRequest, "num_frames must be 4k+1 (1, 5, 9, …), got ", *r.num_frames);
    OMNI_CHECK(*r.fps >= 1 && *r.fps <= 240, InvalidRequest, "fps must be in 1..240, got ", *r.fps);
    return r;
  }

  std::vector<std::string> call_schedule(const GenerationRequest& r) const override {
    return batch_call_schedule({r});
  }

  // Note [Phase-batched runs]: the encoder and the VAE run per request, the
  // experts once per forward for the whole batch.
  std::optional<std::string> batch_key(const GenerationRequest& r) const override {
    return video_batch_key(r);
  }

  std::vector<std::string> batch_call_schedule(
      const std::vector<GenerationRequest>& requests) const override {
    const auto& r = requests.front();
    std::vector<std::string> calls(2 * requests.size(), "text_encoder");
    for (int i = 0; i < *r.steps; ++i)
      calls.insert(calls.end(), 2,
                   high_noise(sigma(i, *r.steps)) ? "transformer" : "transformer_2");
    calls.insert(calls.end(), requests.size(), "vae");
    return calls;
  }

  bool prompts_cached(const GenerationRequest& r, PromptCache& cache) const override {
    return cache.contains(PromptCache::key(cache_encoder(), {tokens(r.prompt)})) &&
           cache.contains(PromptCache::key(cache_encoder(), {tokens(r.negative_prompt)}));
  }

  GenerationOutput run(const GenerationRequest& r, const RunContext& ctx) override {
    return std::move(run_batch({r}, ctx).front());
  }

  std::vector<GenerationOutput> run_batch(const std::vector<GenerationRequest>& requests,
                                          const RunContext& ctx) override {
    const auto dev = ctx.compute;
    const auto& first = requests.front();
    for (const auto& r : requests)
      OMNI_INTERNAL_ASSERT(video_batch_key(r) == video_batch_key(first),
                           "requests of different shapes in one batch");
    auto encode = [&](const std::string& text) {
      const auto ids = tokens(text);
      return encode_cached(ctx.prompt_cache, cache_encoder(), {ids}, dev,
                           [&] { return text_encoder(ids.to(dev)); });
    };
    std::vector<torch::Tensor> conds, unconds, noise;
    for (const auto& r : requests) {
      conds.push_back(encode(r.prompt));
      unconds.push_back(encode(r.negative_prompt));
    }
    const std::int64_t frames = (*first.num_frames - 1) / 4 + 1;
    for (const auto& r : requests) {
      auto generator = at::detail::createCPUGenerator(r.seed);
      noise.push_back(
          torch::randn({1, config_.latent_channels, frames, *r.height / 8, *r.width / 8}, generator,
                       torch::TensorOptions().dtype(torch::kFloat32))
              .to(dev));
    }
    const auto cond = torch::cat(conds);
    const auto uncond = torch::cat(unconds);
    auto latents = torch::cat(noise);
    const auto batch = latents.size(0);
    // Flow-matching Euler with a shifted sigma schedule.
    const int n = *first.steps;
    for (int i = 0; i < n; ++i) {
      const double t = sigma(i, n) * 1000.0;
      const bool high = high_noise(sigma(i, n));
      auto& expert = high ? transformer : transformer_2;
      const double g = high ? *first.guidance_scale : *first.guidance_scale_2;
      auto tt = torch::full({batch}, t, torch::TensorOptions().dtype(torch::kFloat32).device(dev));
      auto v_cond = expert(latents, tt, cond);
      auto v_uncond = expert(latents, tt, uncond);
      auto v = v_uncond + g * (v_cond - v_uncond);
      latents = latents + (sigma(i + 1, n) - sigma(i, n)) * v;
      if (ctx.progress) ctx.progress(i + 1, n);
    }
    std::vector<GenerationOutput> outputs;
    for (std::int64_t i = 0; i < batch; ++i) {
      auto video = vae->decode(latents.narrow(0, i, 1));  // [1, 3, F, H, W]
      auto frames_u8 = ((video[0].permute({1, 2, 3, 0}) * 0.5 + 0.5).clamp(0, 1) * 255)
                           .round()
                           .to(torch::kUInt8)
                           .to(torch::kCPU)
                           .contiguous();
      outputs.push_back({frames_u8, *requests[static_cast<std::size_t>(i)].fps});
    }
    return outputs;
  }

  TextEncoder text_encoder{nullptr};
  DiT transformer{nullptr}, transformer_2{nullptr};
  Vae vae{nullptr};

 private:
  // The shifted sigma of step i of n (step n: 0).
  double sigma(int i, int n) const {
    const double s = 1.0 - static_cast<double>(i) / n;
    return config_.shift * s / (1 + (config_.shift - 1) * s);
  }
  bool high_noise(double sigma) const { return sigma * 1000.0 >= config_.boundary_ratio * 1000.0; }
  torch::Tensor tokens(const std::string& text) const {
    return tokenize(text, config_.vocab, config_.max_tokens);
  }
  // The prompt cache's name for this encoder (Note [Prompt cache]).
  std::string cache_encoder() const { return detail::concat("wan-shaped@", text_encoder.get()); }

  WanShapedConfig config_;
};

}  // namespace

std::shared_ptr<Pipeline> make_wan_shaped_example(const WanShapedConfig& config) {
  return std::make_shared<WanShapedPipeline>(config);
}

}  // namespace omni::pipelines
