// LoRA fidelity against diffusers (tests/data/wan/README.md section 6): the
// reference pipeline's experts with a random LoRA each (original-Wan keys on
// transformer, Kohya keys at scale 0.8 on transformer_2), loaded and fused by
// diffusers, then 4 steps at guidance 1. omni fuses the same files at load
// (EngineArgs::loras) and runs the same loop from the same inputs.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <iterator>

#include "omni/io/safetensors.h"
#include "omni/io/tokenizer.h"
#include "omni/omni.h"
#include "omni/pipelines/request_preset.h"
#include "omni/pipelines/wan_pipeline.h"
#include "pipelines/tiny_wan.h"
#include "support/tensor_checks.h"

using namespace omni;
using pipelines::WanPipeline;

namespace wan_lora_fixture_test {

namespace fs = std::filesystem;

const fs::path kBase = tiny_wan::data("wan_pipeline");
const fs::path kLora = tiny_wan::data("wan_pipeline_lora");

std::map<std::string, torch::Tensor> read(const fs::path& path) {
  std::map<std::string, torch::Tensor> out;
  for (auto& [k, v] : io::load_safetensors(path)) out[k] = v;
  return out;
}

std::string file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

struct Run {
  torch::Tensor latents, video;
};

Run run(Omni& engine) {
  auto& pipe = dynamic_cast<WanPipeline&>(engine.pipeline());
  const auto in = read(kBase / "inputs.safetensors");
  torch::NoGradGuard no_grad;
  const auto result = pipe.denoise(in.at("prompt_embeds"), torch::Tensor(), in.at("latents"),
                                   {.steps = 4, .guidance_scale = 1.0, .guidance_scale_2 = 1.0});
  return {result.latents,
          WanPipeline::postprocess_video(pipe.decode(pipe.unnormalize_latents(result.latents)))};
}

EngineArgs fixture_args(double scale_2 = 0.8) {
  EngineArgs args;
  args.model = kBase.string();
  args.device = "cpu";
  args.offload.quiet = true;
  args.loras = {{.component = "transformer", .path = kLora / "lora_transformer.safetensors"},
                {.component = "transformer_2",
                 .path = kLora / "lora_transformer_2.safetensors",
                 .scale = scale_2}};
  return args;
}

// A two-expert WanPipeline with a text encoder (boundary_ratio 0.875).
std::shared_ptr<pipelines::Pipeline> tiny_shapes() {
  return pipelines::load_pipeline(std::string(OMNI_SOURCE_DIR) + "/models/tiny-shapes");
}

}  // namespace wan_lora_fixture_test
using namespace wan_lora_fixture_test;

TEST(WanLoraFixture, FusedExpertsMatchDiffusersFuseLora) {
  const auto weights = kBase / "transformer" / "weights.safetensors";
  const auto bytes_before = file_bytes(weights);
  Omni engine(fixture_args());
  ASSERT_EQ(engine.loras().size(), 2u);
  EXPECT_EQ(engine.loras()[0].style, "original-wan");
  EXPECT_EQ(engine.loras()[0].tensors, 21u);  // 2 blocks × 10 layers + head
  EXPECT_EQ(engine.loras()[1].style, "kohya");
  EXPECT_EQ(engine.loras()[1].tensors, 20u);
  EXPECT_EQ(engine.loras()[0].unused_pairs + engine.loras()[1].unused_pairs, 0u);

  const auto expected = read(kLora / "outputs.safetensors");
  const auto mine = run(engine);
  const double latents_err = omni::testing::max_abs_diff(mine.latents, expected.at("latents.f32"));
  const double video_err = omni::testing::max_abs_diff(mine.video, expected.at("video.f32"));
  std::printf("wan_pipeline_lora: latents max abs diff %.3g, video %.3g\n", latents_err, video_err);
  EXPECT_LE(latents_err, 1e-4);
  EXPECT_LE(video_err, 1e-4);

  // The base run is far from it: the tolerance would catch a LoRA not applied
  auto base_args = fixture_args();
  base_args.loras.clear();
  Omni base(base_args);
  EXPECT_GT(omni::testing::max_abs_diff(run(base).latents, expected.at("latents.f32")),
            100 * latents_err + 1e-3);
  // and one applied at the wrong scale.
  Omni wrong(fixture_args(1.0));
  EXPECT_GT(omni::testing::max_abs_diff(run(wrong).latents, expected.at("latents.f32")),
            100 * latents_err + 1e-3);

  // The weights alias the mapped checkpoint (Note [Weights that alias the
  // file]); fusing wrote private pages, never the file.
  EXPECT_EQ(file_bytes(weights), bytes_before);
}

TEST(WanLoraFixture, GuidanceOneSchedulesOneExpertCallPerStep) {
  // models/tiny-shapes loads its tokenizer (the sanitizer build has none).
  if (!io::Tokenizer::available()) GTEST_SKIP() << "built without OMNI_WITH_TOKENIZER";
  const auto pipeline = tiny_shapes();
  auto& pipe = *pipeline;
  auto count = [](const std::vector<std::string>& calls, const std::string& name) {
    return std::count(calls.begin(), calls.end(), name);
  };
  GenerationRequest r{.prompt = "a red circle", .steps = 4};
  r.guidance_scale = 1.0;
  auto calls = pipe.call_schedule(pipe.resolve(r));
  EXPECT_EQ(count(calls, "transformer") + count(calls, "transformer_2"), 4);
  r.guidance_scale = 0.5;
  calls = pipe.call_schedule(pipe.resolve(r));
  EXPECT_EQ(count(calls, "transformer") + count(calls, "transformer_2"), 4);
  r.guidance_scale = 4.0;
  calls = pipe.call_schedule(pipe.resolve(r));
  EXPECT_EQ(count(calls, "transformer") + count(calls, "transformer_2"), 8);
}

TEST(RequestPreset, LightningFillsWhatTheRequestLeavesUnset) {
  const auto r = pipelines::apply_preset({.prompt = "a cat"}, "lightning");
  EXPECT_EQ(r.steps, 4);
  EXPECT_EQ(r.guidance_scale, 1.0);
  EXPECT_FALSE(r.guidance_scale_2);  // resolve copies guidance_scale to both experts
  EXPECT_EQ(r.flow_shift, 5.0);
  GenerationRequest own{.prompt = "a cat", .steps = 8};
  own.flow_shift = 3.0;
  const auto mine = pipelines::apply_preset(own, "lightning");
  EXPECT_EQ(mine.steps, 8);
  EXPECT_EQ(mine.flow_shift, 3.0);
  EXPECT_EQ(mine.guidance_scale, 1.0);
  EXPECT_THROW(pipelines::apply_preset({.prompt = "a cat"}, "turbo"), InvalidRequest);
}

TEST(RequestPreset, LightningOverTheModelDefaultsRunsOneCallPerStep) {
  // models/tiny-shapes loads its tokenizer (the sanitizer build has none).
  if (!io::Tokenizer::available()) GTEST_SKIP() << "built without OMNI_WITH_TOKENIZER";
  const auto pipeline = tiny_shapes();
  auto& pipe = *pipeline;
  const auto r = pipe.resolve(pipelines::apply_preset({.prompt = "a red circle"}, "lightning"));
  EXPECT_EQ(r.steps, 4);
  EXPECT_EQ(r.guidance_scale, 1.0);
  EXPECT_EQ(r.guidance_scale_2, 1.0);
  const auto calls = pipe.call_schedule(r);
  EXPECT_EQ(std::count(calls.begin(), calls.end(), "text_encoder"), 1);  // no negative prompt
  EXPECT_EQ(std::count(calls.begin(), calls.end(), "transformer") +
                std::count(calls.begin(), calls.end(), "transformer_2"),
            4);
}
