// WanPipeline: request defaults and validation, prompt encoding, the
// denoising loop (Note [WanPipeline loop]), decoding.
#include "omni/pipelines/wan_pipeline.h"

#include <cmath>

#include "omni/error.h"

namespace omni::pipelines {

namespace {

bool is_space(unsigned char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// html.unescape for the entities prompts actually carry (named &amp; &lt;
// &gt; &quot; &apos; &nbsp; and numeric &#N; / &#xN;), as UTF-8.
std::string html_unescape(const std::string& text) {
  static const std::vector<std::pair<std::string, std::string>> named = {
      {"&amp;", "&"},   {"&lt;", "<"},   {"&gt;", ">"},
      {"&quot;", "\""}, {"&apos;", "'"}, {"&nbsp;", "\xC2\xA0"}};
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    if (text[i] != '&') {
      out += text[i++];
      continue;
    }
    bool replaced = false;
    for (const auto& [entity, value] : named) {
      if (text.compare(i, entity.size(), entity) == 0) {
        out += value;
        i += entity.size();
        replaced = true;
        break;
      }
    }
    if (!replaced && i + 2 < text.size() && text[i + 1] == '#') {
      const bool hex = text[i + 2] == 'x' || text[i + 2] == 'X';
      std::size_t j = i + (hex ? 3 : 2);
      std::uint32_t code = 0;
      std::size_t digits = 0;
      for (; j < text.size() && digits < 8; ++j, ++digits) {
        const char c = text[j];
        int v = -1;
        if (c >= '0' && c <= '9')
          v = c - '0';
        else if (hex && c >= 'a' && c <= 'f')
          v = c - 'a' + 10;
        else if (hex && c >= 'A' && c <= 'F')
          v = c - 'A' + 10;
        if (v < 0) break;
        code = code * (hex ? 16 : 10) + v;
      }
      if (digits > 0 && j < text.size() && text[j] == ';' && code > 0 && code <= 0x10FFFF &&
          !(code >= 0xD800 && code <= 0xDFFF)) {
        if (code < 0x80) {
          out += static_cast<char>(code);
        } else if (code < 0x800) {
          out += static_cast<char>(0xC0 | (code >> 6));
          out += static_cast<char>(0x80 | (code & 0x3F));
        } else if (code < 0x10000) {
          out += static_cast<char>(0xE0 | (code >> 12));
          out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
          out += static_cast<char>(0x80 | (code & 0x3F));
        } else {
          out += static_cast<char>(0xF0 | (code >> 18));
          out += static_cast<char>(0x80 | ((code >> 12) & 0x3F));
          out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
          out += static_cast<char>(0x80 | (code & 0x3F));
        }
        i = j + 1;
        replaced = true;
      }
    }
    if (!replaced) out += text[i++];
  }
  return out;
}

// diffusers' prompt_clean without ftfy: html.unescape twice, then runs of
// (ASCII) whitespace become one space and the ends are stripped.
std::string clean_prompt(const std::string& text) {
  const auto unescaped = html_unescape(html_unescape(text));
  std::string out;
  bool pending_space = false;
  for (unsigned char c : unescaped) {
    if (is_space(c)) {
      pending_space = !out.empty();
      continue;
    }
    if (pending_space) out += ' ';
    pending_space = false;
    out += static_cast<char>(c);
  }
  return out;
}

}  // namespace

offload::ComponentSpec WanPipeline::components() const {
  offload::ComponentSpec spec;
  spec.dit_modules.push_back("transformer");
  if (has_transformer_2()) spec.dit_modules.push_back("transformer_2");
  if (has_text_encoder()) spec.encoder_modules.push_back("text_encoder");
  spec.vae_modules.push_back("vae");
  return spec;
}

void WanPipeline::set_max_sequence_length(std::int64_t length) {
  OMNI_CHECK(length >= 1, InvalidRequest, "max_sequence_length must be at least 1, got ", length);
  max_sequence_length_ = length;
}

std::unique_ptr<schedulers::Scheduler> WanPipeline::make_scheduler() const {
  return schedulers::make_scheduler(scheduler_config_, scheduler_source_);
}

std::optional<double> WanPipeline::boundary_timestep() const {
  if (!config_.boundary_ratio) return std::nullopt;
  return *config_.boundary_ratio * num_train_timesteps_;
}

int WanPipeline::expert_for(double t) const {
  const auto boundary = boundary_timestep();
  return !boundary || t >= *boundary ? 0 : 1;
}

GenerationRequest WanPipeline::resolve(const GenerationRequest& in) const {
  OMNI_CHECK(has_text_encoder(), ConfigError,
             "this WanPipeline has no text_encoder/tokenizer (null in model_index.json): it runs "
             "from prompt embeddings only (WanPipeline::denoise), not from a text prompt");
  GenerationRequest r = in;
  const bool two_experts = config_.boundary_ratio.has_value();
  OMNI_CHECK(two_experts || !r.guidance_scale_2, InvalidRequest,
             "guidance_scale_2 needs a two-expert model (boundary_ratio set); this one has a "
             "single transformer");
  if (!r.steps) r.steps = defaults_.steps;
  if (!r.width) r.width = defaults_.width;
  if (!r.height) r.height = defaults_.height;
  if (!r.num_frames) r.num_frames = defaults_.num_frames;
  if (!r.fps) r.fps = defaults_.fps;
  if (!r.guidance_scale) {
    r.guidance_scale = defaults_.guidance_scale;
    if (two_experts && !r.guidance_scale_2) r.guidance_scale_2 = defaults_.guidance_scale_2;
  }
  if (two_experts && !r.guidance_scale_2) r.guidance_scale_2 = r.guidance_scale;

  OMNI_CHECK(!r.prompt.empty(), InvalidRequest, "prompt must not be empty");
  OMNI_CHECK(*r.steps >= 1 && *r.steps <= 1000, InvalidRequest,
             "steps (num_inference_steps) must be in 1..1000, got ", *r.steps);
  const auto& t = transformer->config();
  const auto& v = vae->config();
  const std::int64_t spatial = v.spatial_compression();
  const std::int64_t temporal = v.temporal_compression();
  const auto check_size = [&](const char* field, int value, std::int64_t patch) {
    const std::int64_t multiple = spatial * patch;
    OMNI_CHECK(value >= multiple && value % multiple == 0, InvalidRequest, field,
               " must be a positive multiple of ", multiple, " (VAE ×", spatial, " · patch ×",
               patch, "), got ", value);
    OMNI_CHECK(value / multiple <= t.rope_max_seq_len, InvalidRequest, field, " ", value, " gives ",
               value / multiple, " patches, more than the transformer's ", "rope_max_seq_len ",
               t.rope_max_seq_len, " (at most ", t.rope_max_seq_len * multiple, ")");
  };
  check_size("height", *r.height, t.patch_size[1]);
  check_size("width", *r.width, t.patch_size[2]);
  OMNI_CHECK(*r.num_frames >= 1 && (*r.num_frames - 1) % temporal == 0, InvalidRequest,
             "num_frames must be ", temporal, "k+1 (1, ", temporal + 1, ", ", 2 * temporal + 1,
             ", …), got ", *r.num_frames);
  const std::int64_t latent_frames = (*r.num_frames - 1) / temporal + 1;
  OMNI_CHECK(
      latent_frames % t.patch_size[0] == 0 && latent_frames / t.patch_size[0] <= t.rope_max_seq_len,
      InvalidRequest, "num_frames ", *r.num_frames, " gives ", latent_frames,
      " latent frames, which the transformer cannot take (patch ", t.patch_size[0],
      ", rope_max_seq_len ", t.rope_max_seq_len, ")");
  OMNI_CHECK(std::isfinite(*r.guidance_scale), InvalidRequest,
             "guidance_scale must be finite, got ", *r.guidance_scale);
  OMNI_CHECK(!r.guidance_scale_2 || std::isfinite(*r.guidance_scale_2), InvalidRequest,
             "guidance_scale_2 must be finite, got ", r.guidance_scale_2.value_or(0));
  OMNI_CHECK(*r.fps >= 1 && *r.fps <= 240, InvalidRequest, "fps must be in 1..240, got ", *r.fps);
  return r;
}

torch::Tensor WanPipeline::encode_prompt(const std::vector<std::string>& prompts,
                                         torch::Device device) {
  OMNI_CHECK(has_text_encoder() && tokenizer_, ConfigError,
             "this WanPipeline has no text_encoder/tokenizer; pass prompt embeddings instead");
  std::vector<std::string> cleaned;
  for (const auto& p : prompts) cleaned.push_back(clean_prompt(p));
  const auto tokens = tokenizer_->tokenize(cleaned, max_sequence_length_);
  const auto ids = tokens.input_ids.to(device);
  const auto mask = tokens.attention_mask.to(device);
  auto hidden = text_encoder(ids, mask);  // runs the encoder's hooks
  // Trim to each prompt's real length and pad with zeros: the same as zeroing
  // every position the mask leaves out.
  hidden = hidden.masked_fill((mask == 0).unsqueeze(-1), 0);
  return hidden.to(transformer_dtype_);
}

torch::Tensor WanPipeline::prepare_latents(std::int64_t batch, int height, int width,
                                           int num_frames, std::uint64_t seed,
                                           torch::Device device) const {
  const auto& v = vae->config();
  const std::int64_t spatial = v.spatial_compression();
  const std::int64_t temporal = v.temporal_compression();
  auto generator = at::detail::createCPUGenerator(seed);
  const std::vector<std::int64_t> shape = {batch, transformer->config().in_channels,
                                           (num_frames - 1) / temporal + 1, height / spatial,
                                           width / spatial};
  return torch::randn(shape, generator, torch::TensorOptions().dtype(torch::kFloat32)).to(device);
}

DenoiseResult WanPipeline::denoise(const torch::Tensor& prompt_embeds,
                                   const torch::Tensor& negative_prompt_embeds,
                                   torch::Tensor latents, const DenoiseArgs& args,
                                   const StepObserver& observer, const ProgressFn& progress) {
  const auto& t_config = transformer->config();
  OMNI_CHECK(args.steps >= 1, InvalidRequest, "steps must be at least 1, got ", args.steps);
  OMNI_CHECK(latents.defined() && latents.dim() == 5 && latents.size(1) == t_config.in_channels,
             InvalidRequest, "latents must be [B, ", t_config.in_channels, ", F, H, W], got ",
             latents.defined() ? latents.sizes() : c10::IntArrayRef{});
  const auto batch = latents.size(0);
  const auto check_embeds = [&](const torch::Tensor& e, const char* name) {
    OMNI_CHECK(e.defined() && e.dim() == 3 && e.size(0) == batch && e.size(2) == t_config.text_dim,
               InvalidRequest, name, " must be [", batch, ", L, ", t_config.text_dim, "], got ",
               e.defined() ? e.sizes() : c10::IntArrayRef{});
  };
  check_embeds(prompt_embeds, "prompt_embeds");
  const bool cfg = args.guidance_scale > 1.0;
  if (cfg) check_embeds(negative_prompt_embeds, "negative_prompt_embeds");
  const double g1 = args.guidance_scale;
  const double g2 = args.guidance_scale_2.value_or(args.guidance_scale);

  const auto device = latents.device();
  const auto cond_embeds = prompt_embeds.to(device, transformer_dtype_);
  const auto uncond_embeds =
      cfg ? negative_prompt_embeds.to(device, transformer_dtype_) : torch::Tensor();
  latents = latents.to(torch::kFloat32);  // prepare_latents' dtype, whatever the model's

  auto scheduler = make_scheduler();
  scheduler->set_timesteps(args.steps);
  scheduler->set_begin_index(0);
  const auto timesteps = scheduler->timesteps();
  const int total = static_cast<int>(timesteps.size(0));
  for (int i = 0; i < total; ++i) {
    const auto t = timesteps[i];
    const double t_value = t.item<double>();
    DenoiseStep step;
    step.index = i;
    step.total = total;
    step.expert = expert_for(t_value);
    OMNI_INTERNAL_ASSERT(step.expert == 0 || has_transformer_2(),
                         "low-noise step without transformer_2");
    auto& model = step.expert == 0 ? transformer : transformer_2;
    step.guidance_scale = step.expert == 0 ? g1 : g2;
    step.timestep = t.expand({batch}).to(device);
    step.latents_in = latents;
    const auto model_input = latents.to(transformer_dtype_);
    step.noise_pred_cond = model(model_input, step.timestep, cond_embeds);
    if (cfg) {
      step.noise_pred_uncond = model(model_input, step.timestep, uncond_embeds);
      step.noise_pred = step.noise_pred_uncond +
                        (step.noise_pred_cond - step.noise_pred_uncond) * step.guidance_scale;
    } else {
      step.noise_pred = step.noise_pred_cond;
    }
    latents = scheduler->step(step.noise_pred, t_value, latents);
    step.latents_out = latents;
    if (observer) observer(step);
    if (progress) progress(i + 1, total);
  }
  return {latents, timesteps, scheduler->sigmas()};
}

torch::Tensor WanPipeline::unnormalize_latents(const torch::Tensor& latents) const {
  const auto& v = vae->config();
  const auto z = latents.to(vae_dtype_);
  const auto shape = std::vector<std::int64_t>{1, v.z_dim, 1, 1, 1};
  // As diffusers: float32 tensors from the config lists, 1/std in float32, then
  // both cast to the latents' dtype; divide by the reciprocal.
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32);
  std::vector<float> mean(v.latents_mean.begin(), v.latents_mean.end());
  std::vector<float> std_(v.latents_std.begin(), v.latents_std.end());
  const auto mean_t = torch::tensor(mean, f32).view(shape).to(z.device(), z.scalar_type());
  const auto inv_std_t =
      torch::tensor(std_, f32).reciprocal().view(shape).to(z.device(), z.scalar_type());
  return z / inv_std_t + mean_t;
}

torch::Tensor WanPipeline::decode(const torch::Tensor& z) {
  return vae->decode(z);
}

torch::Tensor WanPipeline::postprocess_video(const torch::Tensor& decoded) {
  OMNI_CHECK(decoded.dim() == 5 && decoded.size(1) == 3, InvalidRequest,
             "decoded video must be [B, 3, F, H, W], got ", decoded.sizes());
  return (decoded.permute({0, 2, 1, 3, 4}) * 0.5 + 0.5).clamp(0, 1).to(torch::kFloat32);
}

torch::Tensor WanPipeline::to_uint8_frames(const torch::Tensor& video) {
  OMNI_CHECK(video.dim() == 5 && video.size(2) == 3, InvalidRequest,
             "video must be [B, F, 3, H, W], got ", video.sizes());
  return (video.permute({0, 1, 3, 4, 2}) * 255.0)
      .round()
      .clamp(0, 255)
      .to(torch::kUInt8)
      .to(torch::kCPU)
      .contiguous();
}

GenerationOutput WanPipeline::run(const GenerationRequest& r, const RunContext& ctx) {
  const auto device = ctx.compute;
  const bool cfg = *r.guidance_scale > 1.0;
  // The encoder runs (and is resident) before any expert: both prompts now.
  const auto prompt_embeds = encode_prompt({r.prompt}, device);
  const auto negative_embeds = cfg ? encode_prompt({r.negative_prompt}, device) : torch::Tensor();
  auto latents = prepare_latents(1, *r.height, *r.width, *r.num_frames, r.seed, device);
  DenoiseArgs args;
  args.steps = *r.steps;
  args.guidance_scale = *r.guidance_scale;
  args.guidance_scale_2 = r.guidance_scale_2;
  const auto result = denoise(prompt_embeds, negative_embeds, latents, args, {}, ctx.progress);
  const auto video = postprocess_video(decode(unnormalize_latents(result.latents)));
  return {to_uint8_frames(video)[0], *r.fps};
}

}  // namespace omni::pipelines
