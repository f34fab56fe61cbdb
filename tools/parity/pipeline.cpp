// Runner for the WanPipeline fixture (README §5): the fixture folder is a
// diffusers directory without text encoder, loaded by the project's loader;
// the call arguments come from pipeline_args.json.
#include "omni/io/json_config.h"
#include "omni/pipelines/wan_pipeline.h"
#include "parity/parity.h"

namespace omni::parity {

namespace {

struct CallArgs {
  int height = 0;
  int width = 0;
  int num_frames = 0;
  int steps = 0;
  double guidance_scale = 0;
  std::optional<double> guidance_scale_2;
  std::optional<double> boundary_ratio;
  bool has_boundary_ratio = false;  // pipeline_args states one (null or a value)
};

template <typename T>
T field(const nlohmann::json& object, const char* section, const char* name,
        const std::string& source) {
  if (!object.contains(name))
    throw FixtureError(source + ": '" + section + "." + name + "' is missing");
  try {
    return object.at(name).get<T>();
  } catch (const nlohmann::json::exception& e) {
    throw FixtureError(source + ": '" + section + "." + name + "': " + e.what());
  }
}

CallArgs read_call_args(const Fixture& fixture) {
  const auto path = fixture.dir() / "pipeline_args.json";
  if (!std::filesystem::is_regular_file(path))
    throw FixtureError(path.string() + ": missing (the pipeline's call arguments)");
  const auto json = io::read_json_file(path);
  const auto source = path.string();
  if (!json.contains("call") || !json["call"].is_object())
    throw FixtureError(source + ": no 'call' object");
  const auto& call = json["call"];
  CallArgs a;
  a.height = field<int>(call, "call", "height", source);
  a.width = field<int>(call, "call", "width", source);
  a.num_frames = field<int>(call, "call", "num_frames", source);
  a.steps = field<int>(call, "call", "num_inference_steps", source);
  a.guidance_scale = field<double>(call, "call", "guidance_scale", source);
  if (call.contains("guidance_scale_2") && !call["guidance_scale_2"].is_null())
    a.guidance_scale_2 = field<double>(call, "call", "guidance_scale_2", source);
  if (call.contains("num_videos_per_prompt") && !call["num_videos_per_prompt"].is_null() &&
      call["num_videos_per_prompt"] != 1)
    throw FixtureError(source + ": num_videos_per_prompt other than 1 is not supported");
  if (json.contains("constructor") && json["constructor"].contains("boundary_ratio")) {
    a.has_boundary_ratio = true;
    const auto& b = json["constructor"]["boundary_ratio"];
    if (!b.is_null())
      a.boundary_ratio =
          field<double>(json["constructor"], "constructor", "boundary_ratio", source);
  }
  return a;
}

}  // namespace

Computed run_pipeline(const Fixture& fixture, const RunOptions& options) {
  const auto args = read_call_args(fixture);
  // Through the registry, as `omni generate` would load it.
  auto loaded = pipelines::load_pipeline(fixture.dir().string());
  auto pipe = std::dynamic_pointer_cast<pipelines::WanPipeline>(loaded);
  if (!pipe) throw FixtureError(fixture.dir().string() + ": did not load as a WanPipeline");
  if (args.has_boundary_ratio && args.boundary_ratio != pipe->config().boundary_ratio)
    throw FixtureError(fixture.dir().string() +
                       ": pipeline_args.json's boundary_ratio differs from model_index.json's");
  pipe->to(options.device);

  const auto latents = fixture.input("latents").to(options.device);
  const auto prompt_embeds = fixture.input("prompt_embeds").to(options.device);
  const auto negative_embeds = fixture.input("negative_prompt_embeds").to(options.device);
  // height/width/num_frames only have to agree with the latents (README §5).
  const auto& vae = pipe->vae->config();
  const std::vector<std::int64_t> expected = {
      latents.size(0), vae.z_dim, (args.num_frames - 1) / vae.temporal_compression() + 1,
      args.height / vae.spatial_compression(), args.width / vae.spatial_compression()};
  if (latents.sizes() != c10::IntArrayRef(expected))
    throw FixtureError(fixture.dir().string() + ": latents shape does not match height " +
                       std::to_string(args.height) + ", width " + std::to_string(args.width) +
                       ", num_frames " + std::to_string(args.num_frames));

  pipelines::DenoiseArgs denoise_args;
  denoise_args.steps = args.steps;
  denoise_args.guidance_scale = args.guidance_scale;
  denoise_args.guidance_scale_2 = args.guidance_scale_2;
  if (pipe->config().boundary_ratio && !denoise_args.guidance_scale_2)
    denoise_args.guidance_scale_2 = args.guidance_scale;  // as diffusers' __call__

  std::vector<torch::Tensor> expert, guidance, timestep, latents_in, pred, latents_out;
  const auto result = pipe->denoise(
      prompt_embeds, negative_embeds, latents, denoise_args, [&](const pipelines::DenoiseStep& s) {
        expert.push_back(torch::tensor(static_cast<double>(s.expert)));
        guidance.push_back(torch::tensor(s.guidance_scale));
        timestep.push_back(s.timestep.cpu());
        latents_in.push_back(s.latents_in.cpu());
        pred.push_back(s.noise_pred.cpu());
        latents_out.push_back(s.latents_out.cpu());
      });

  Computed out;
  out["timesteps"] = result.timesteps;
  out["sigmas"] = result.sigmas;
  out["expert_index"] = torch::stack(expert);
  out["guidance_scale_per_step"] = torch::stack(guidance);
  out["step_timestep"] = torch::stack(timestep);
  out["step_latents_in"] = torch::stack(latents_in);
  out["step_noise_pred"] = torch::stack(pred);
  out["step_latents_out"] = torch::stack(latents_out);
  out["latents"] = result.latents;

  // Isolated single-step checks: each step's expert fed the stored latents.
  const auto stored_in =
      fixture.has_output("step_latents_in") ? fixture.output("step_latents_in") : torch::Tensor();
  if (stored_in.defined() && stored_in.size(0) == static_cast<std::int64_t>(expert.size())) {
    std::vector<torch::Tensor> cond, uncond;
    for (std::size_t i = 0; i < expert.size(); ++i) {
      auto& model = expert[i].item<double>() == 0 ? pipe->transformer : pipe->transformer_2;
      const auto x = stored_in[i].to(options.device).to(pipe->transformer_dtype());
      const auto t = timestep[i].to(options.device);
      cond.push_back(model(x, t, prompt_embeds).cpu());
      uncond.push_back(model(x, t, negative_embeds).cpu());
    }
    out["step_noise_pred_cond"] = torch::stack(cond);
    out["step_noise_pred_uncond"] = torch::stack(uncond);
  }

  const auto decoder_input = pipe->unnormalize_latents(result.latents);
  out["decoder_input"] = decoder_input;
  out["video"] = pipelines::WanPipeline::postprocess_video(pipe->decode(decoder_input));
  return out;
}

}  // namespace omni::parity
