// The stages shared by the pipelines over Wan latents (wan_video_stages.h).
#include "omni/pipelines/wan_video_stages.h"

#include <torch/torch.h>

#include <cmath>
#include <cstdio>

#include "omni/error.h"

namespace omni::pipelines {

WanDefaults WanDefaults::single_expert() {
  WanDefaults d;
  d.steps = 50;
  d.guidance_scale = 5.0;
  d.guidance_scale_2 = 5.0;
  return d;
}

std::vector<std::string> wan_call_schedule(const torch::Tensor& timesteps,
                                           std::optional<double> boundary_timestep, bool cfg,
                                           std::size_t batch) {
  const std::size_t forwards = cfg ? 2 : 1;
  std::vector<std::string> calls(forwards * batch, "text_encoder");
  for (std::int64_t i = 0; i < timesteps.size(0); ++i) {
    const bool high_noise = !boundary_timestep || timesteps[i].item<double>() >= *boundary_timestep;
    calls.insert(calls.end(), forwards, high_noise ? "transformer" : "transformer_2");
  }
  calls.insert(calls.end(), batch, "vae");
  return calls;
}

GenerationRequest resolve_video_request(const GenerationRequest& in, const WanDefaults& defaults,
                                        const models::wan::WanTransformer3DConfig& t,
                                        const models::wan::AutoencoderKLWanConfig& v,
                                        bool two_experts) {
  GenerationRequest r = in;
  if (!r.steps) r.steps = defaults.steps;
  if (!r.width) r.width = defaults.width;
  if (!r.height) r.height = defaults.height;
  if (!r.num_frames) r.num_frames = defaults.num_frames;
  if (!r.fps) r.fps = defaults.fps;
  if (!r.guidance_scale) {
    r.guidance_scale = defaults.guidance_scale;
    if (two_experts && !r.guidance_scale_2) r.guidance_scale_2 = defaults.guidance_scale_2;
  }
  if (two_experts && !r.guidance_scale_2) r.guidance_scale_2 = r.guidance_scale;

  OMNI_CHECK(!r.prompt.empty(), InvalidRequest, "prompt must not be empty");
  OMNI_CHECK(*r.steps >= 1 && *r.steps <= 1000, InvalidRequest,
             "steps (num_inference_steps) must be in 1..1000, got ", *r.steps);
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
  OMNI_CHECK(!r.boundary_ratio || (*r.boundary_ratio > 0.0 && *r.boundary_ratio < 1.0),
             InvalidRequest, "boundary_ratio must be in (0, 1), got ",
             r.boundary_ratio.value_or(0));
  OMNI_CHECK(!r.flow_shift || (std::isfinite(*r.flow_shift) && *r.flow_shift > 0.0), InvalidRequest,
             "flow_shift must be a positive number, got ", r.flow_shift.value_or(0));
  return r;
}

std::string video_batch_key(const GenerationRequest& r) {
  // Hexadecimal floats: equal text only for equal values.
  char guidance[80];
  std::snprintf(guidance, sizeof guidance, "%a,%a", r.guidance_scale.value_or(1.0),
                r.guidance_scale_2.value_or(r.guidance_scale.value_or(1.0)));
  char overrides[80] = "";
  if (r.boundary_ratio || r.flow_shift)
    std::snprintf(overrides, sizeof overrides, ",b%a,s%a", r.boundary_ratio.value_or(-1.0),
                  r.flow_shift.value_or(-1.0));
  return detail::concat(r.width.value_or(0), "x", r.height.value_or(0), ",",
                        r.num_frames.value_or(0), "f,", r.steps.value_or(0), "s,", guidance,
                        overrides);
}

torch::Tensor prepare_video_latents(const models::wan::WanTransformer3DConfig& denoiser,
                                    const models::wan::AutoencoderKLWanConfig& vae,
                                    std::int64_t batch, int height, int width, int num_frames,
                                    std::uint64_t seed, torch::Device device) {
  const std::int64_t spatial = vae.spatial_compression();
  const std::int64_t temporal = vae.temporal_compression();
  auto generator = at::detail::createCPUGenerator(seed);
  const std::vector<std::int64_t> shape = {batch, denoiser.in_channels,
                                           (num_frames - 1) / temporal + 1, height / spatial,
                                           width / spatial};
  return torch::randn(shape, generator, torch::TensorOptions().dtype(torch::kFloat32)).to(device);
}

void check_denoise_inputs(const models::wan::WanTransformer3DConfig& t_config,
                          const torch::Tensor& prompt_embeds,
                          const torch::Tensor& negative_prompt_embeds, const torch::Tensor& latents,
                          const DenoiseArgs& args) {
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
  if (args.guidance_scale > 1.0) check_embeds(negative_prompt_embeds, "negative_prompt_embeds");
}

DenoiseResult run_denoise_loop(schedulers::Scheduler& scheduler, torch::Tensor latents, int steps,
                               const StepPredictor& predict, const StepObserver& observer,
                               const ProgressFn& progress, int first_step) {
  OMNI_CHECK(first_step >= 0 && first_step < steps, InvalidRequest,
             "the first denoising step must be in 0..", steps - 1, ", got ", first_step);
  const auto device = latents.device();
  const auto batch = latents.size(0);
  scheduler.set_timesteps(steps);
  scheduler.set_begin_index(first_step);
  const auto timesteps = scheduler.timesteps();
  const int total = static_cast<int>(timesteps.size(0));
  // Every step's timestep goes to the device once, before the loop, from
  // page-locked memory: a copy per step from pageable memory would make the
  // host wait for the device at every step.
  const auto on_device =
      device.is_cpu() ? timesteps : timesteps.pin_memory().to(device, /*non_blocking=*/true);
  for (int i = first_step; i < total; ++i) {
    const double t_value = timesteps[i].item<double>();
    DenoiseStep step;
    step.index = i;
    step.total = total;
    step.timestep = on_device[i].expand({batch});
    step.latents_in = latents;
    predict(step, t_value);
    if (step.noise_pred_uncond.defined()) {
      step.noise_pred = step.noise_pred_uncond +
                        (step.noise_pred_cond - step.noise_pred_uncond) * step.guidance_scale;
    } else {
      step.noise_pred = step.noise_pred_cond;
    }
    latents = scheduler.step(step.noise_pred, t_value, latents);
    step.latents_out = latents;
    if (observer) observer(step);
    if (progress) progress(i + 1, total);
  }
  return {latents, timesteps, scheduler.sigmas()};
}

namespace {

// latents_mean and 1/latents_std as [1, z_dim, 1, 1, 1] float32 tensors, as
// diffusers builds them from the config lists.
std::pair<torch::Tensor, torch::Tensor> latent_mean_and_inverse_std(
    const models::wan::AutoencoderKLWanConfig& v) {
  const auto shape = std::vector<std::int64_t>{1, v.z_dim, 1, 1, 1};
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32);
  std::vector<float> mean(v.latents_mean.begin(), v.latents_mean.end());
  std::vector<float> std_(v.latents_std.begin(), v.latents_std.end());
  return {torch::tensor(mean, f32).view(shape), torch::tensor(std_, f32).reciprocal().view(shape)};
}

}  // namespace

torch::Tensor unnormalize_video_latents(const models::wan::AutoencoderKLWanConfig& v,
                                        const torch::Tensor& latents, torch::ScalarType vae_dtype) {
  const auto z = latents.to(vae_dtype);
  // As diffusers: 1/std in float32, then both cast to the latents' dtype;
  // divide by the reciprocal.
  const auto [mean, inv_std] = latent_mean_and_inverse_std(v);
  return z / inv_std.to(z.device(), z.scalar_type()) + mean.to(z.device(), z.scalar_type());
}

torch::Tensor normalize_video_latents(const models::wan::AutoencoderKLWanConfig& v,
                                      const torch::Tensor& latents) {
  const auto z = latents.to(torch::kFloat32);
  const auto [mean, inv_std] = latent_mean_and_inverse_std(v);
  return (z - mean.to(z.device())) * inv_std.to(z.device());
}

torch::Tensor postprocess_video(const torch::Tensor& decoded) {
  OMNI_CHECK(decoded.dim() == 5 && decoded.size(1) == 3, InvalidRequest,
             "decoded video must be [B, 3, F, H, W], got ", decoded.sizes());
  return (decoded.permute({0, 2, 1, 3, 4}) * 0.5 + 0.5).clamp(0, 1).to(torch::kFloat32);
}

torch::Tensor to_uint8_frames(const torch::Tensor& video) {
  OMNI_CHECK(video.dim() == 5 && video.size(2) == 3, InvalidRequest,
             "video must be [B, F, 3, H, W], got ", video.sizes());
  return (video.permute({0, 1, 3, 4, 2}) * 255.0)
      .round()
      .clamp(0, 255)
      .to(torch::kUInt8)
      .to(torch::kCPU)
      .contiguous();
}

}  // namespace omni::pipelines
