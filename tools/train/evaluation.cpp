// Generation and scoring of the evaluation prompts (evaluation.h).
#include "evaluation.h"

#include <c10/core/InferenceMode.h>
#include <torch/torch.h>

#include <iomanip>
#include <random>
#include <sstream>
#include <stdexcept>

#include "omni/pipelines/omni_unified_pipeline.h"
#include "omni/pipelines/wan_pipeline.h"

namespace omni::train {

EvalResult evaluate_model(pipelines::Pipeline& pipe, const std::vector<EvalCase>& cases,
                          const EvalOptions& options) {
  c10::InferenceMode inference;
  EvalResult result;
  for (const auto& c : cases) {
    pipelines::GenerationRequest request;
    request.prompt = prompt_of(c.spec);
    request.seed = c.seed;
    request.width = options.size;
    request.height = options.size;
    request.num_frames = options.num_frames;
    request.steps = options.steps;
    request.guidance_scale = options.guidance_scale;
    const auto output = pipe.run(pipe.resolve(request), {});
    CaseResult r{c, request.prompt, measure_clip(output.frames), {}, output.frames};
    r.score = score(r.measured, c.spec);
    (c.held_out ? result.held_out : result.seen).add(r.score);
    result.cases.push_back(std::move(r));
  }
  return result;
}

namespace {
// The Wan VAE of the pipelines that have one.
models::wan::AutoencoderKLWan vae_of(pipelines::Pipeline& pipe) {
  if (auto* wan = dynamic_cast<pipelines::WanPipeline*>(&pipe)) return wan->vae;
  if (auto* unified = dynamic_cast<pipelines::OmniUnifiedPipeline*>(&pipe)) return unified->vae;
  throw std::invalid_argument(
      "evaluate_reconstruction needs a WanPipeline or an "
      "OmniUnifiedPipeline, not a " +
      pipe.class_name());
}
}  // namespace

EvalResult evaluate_reconstruction(pipelines::Pipeline& pipe, const std::vector<EvalCase>& cases) {
  auto vae = vae_of(pipe);
  c10::InferenceMode inference;
  EvalResult result;
  for (const auto& c : cases) {
    std::mt19937_64 rng(c.seed);
    const auto video = draw_clip(place_clip(rng, c.spec)).unsqueeze(0);
    const auto decoded = vae->decode(vae->encode(video).mean);
    const auto frames = to_uint8_frames(decoded[0]);
    CaseResult r{c, prompt_of(c.spec), measure_clip(frames), {}, frames};
    r.score = score(r.measured, c.spec);
    (c.held_out ? result.held_out : result.seen).add(r.score);
    result.cases.push_back(std::move(r));
  }
  return result;
}

EvalResult evaluate_from_noised(pipelines::Pipeline& pipe, const std::vector<EvalCase>& cases,
                                const EvalOptions& options, double sigma_start) {
  auto* wan = dynamic_cast<pipelines::WanPipeline*>(&pipe);
  if (wan == nullptr)
    throw std::invalid_argument("denoising a drawn clip needs a WanPipeline, not a " +
                                pipe.class_name());
  if (!(sigma_start > 0.0 && sigma_start <= 1.0))
    throw std::invalid_argument("the starting noise level must be in (0, 1]");
  c10::InferenceMode inference;
  const auto cpu = torch::Device(torch::kCPU);
  const int steps = options.steps.value_or(wan->defaults().steps);
  const double g1 = options.guidance_scale.value_or(wan->defaults().guidance_scale);
  const double g2 = options.guidance_scale.value_or(
      wan->has_transformer_2() ? wan->defaults().guidance_scale_2 : wan->defaults().guidance_scale);
  const auto negative = wan->encode_prompt({""}, cpu);
  EvalResult result;
  for (const auto& c : cases) {
    std::mt19937_64 rng(c.seed);
    const ClipGeometry geometry{
        .width = options.size, .height = options.size, .frames = options.num_frames};
    const auto video = draw_clip(place_clip(rng, c.spec, geometry), geometry).unsqueeze(0);
    const auto x0 =
        pipelines::normalize_video_latents(wan->vae->config(), wan->vae->encode(video).mean);
    const auto noise =
        wan->prepare_latents(1, options.size, options.size, options.num_frames, c.seed, cpu);
    if (!x0.sizes().equals(noise.sizes()))
      throw std::logic_error("the drawn clip's latents do not match the pipeline's noise");
    pipelines::DenoiseArgs args;
    args.steps = steps;
    args.guidance_scale = g1;
    args.guidance_scale_2 = g2;
    // The first step of the schedule at or below sigma_start.
    auto scheduler = wan->make_scheduler();
    scheduler->set_timesteps(steps);
    const auto sigmas = scheduler->sigmas();
    while (args.first_step < steps - 1 && sigmas[args.first_step].item<double>() > sigma_start)
      ++args.first_step;
    const double sigma = sigmas[args.first_step].item<double>();
    auto asked = c.spec;
    if (options.prompt_shape) asked.shape = *options.prompt_shape;
    const auto prompt = prompt_of(asked);
    const auto x = wan->denoise(wan->encode_prompt({prompt}, cpu), negative,
                                (1.0 - sigma) * x0 + sigma * noise, args)
                       .latents;
    const auto decoded = wan->decode(wan->unnormalize_latents(x));
    const auto frames = to_uint8_frames(decoded[0]);
    CaseResult r{c, prompt, measure_clip(frames), {}, frames};
    r.score = score(r.measured, c.spec);
    (c.held_out ? result.held_out : result.seen).add(r.score);
    result.cases.push_back(std::move(r));
  }
  return result;
}

std::string format_report(const EvalResult& result) {
  std::ostringstream out;
  for (const auto& r : result.cases) {
    const auto mark = [](bool ok) { return ok ? "+" : "-"; };
    out << (r.eval.held_out ? "held " : "seen ") << mark(r.score.foreground)
        << mark(r.score.background) << mark(r.score.shape) << mark(r.score.motion) << "  "
        << std::left << std::setw(58) << r.prompt << " seed " << r.eval.seed << "  "
        << describe(r.measured) << "\n";
  }
  const auto line = [&](const char* name, const QualityTally& t) {
    out << std::left << std::setw(10) << name << " clips " << std::setw(4) << t.clips << std::fixed
        << std::setprecision(1) << " foreground " << 100 * t.rate(t.foreground) << "%  background "
        << 100 * t.rate(t.background) << "%  shape " << 100 * t.rate(t.shape) << "%  direction "
        << 100 * t.rate(t.motion) << "%\n";
  };
  out << "legend: + right / - wrong for foreground, background, shape, direction\n";
  line("seen", result.seen);
  line("held-out", result.held_out);
  QualityTally all = result.seen;
  all.clips += result.held_out.clips;
  all.foreground += result.held_out.foreground;
  all.background += result.held_out.background;
  all.shape += result.held_out.shape;
  all.motion += result.held_out.motion;
  line("all", all);
  return out.str();
}

torch::Tensor case_sheet(const std::vector<CaseResult>& cases, int rows) {
  std::vector<torch::Tensor> lines;
  const auto gap = [](const torch::Tensor& like, std::int64_t h, std::int64_t w) {
    return torch::full({h, w, 3}, 255, like.options());
  };
  for (int i = 0; i < rows && i < static_cast<int>(cases.size()); ++i) {
    const auto& frames = cases[static_cast<std::size_t>(i)].frames;
    std::vector<torch::Tensor> row;
    for (std::int64_t f = 0; f < frames.size(0); f += 2) {
      row.push_back(frames[f]);
      row.push_back(gap(frames, frames.size(1), 2));
    }
    lines.push_back(torch::cat(row, 1));
    lines.push_back(gap(frames, 2, lines.back().size(1)));
  }
  return torch::cat(lines, 0).contiguous();
}

}  // namespace omni::train
