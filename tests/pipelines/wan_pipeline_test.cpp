// WanPipeline end to end on a tiny random diffusers directory: offload
// parity, residency order, prompt encoding, the Wan2.1-style single expert,
// the loop's building blocks.
#include "omni/pipelines/wan_pipeline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>

#include "omni/error.h"
#include "omni/omni.h"
#include "pipelines/tiny_wan.h"

using namespace omni;
using offload::Residency;
using offload::ResidencyEvent;
using pipelines::WanPipeline;

// Named, not anonymous: in a unity build this file is included into another,
// and GCC warns of fixtures with internal linkage there (-Wsubobject-linkage).
namespace wan_pipeline_test {

namespace fs = std::filesystem;

// Removes every folder these tests wrote, once all of them have run.
[[maybe_unused]] auto* const clean_up = ::testing::AddGlobalTestEnvironment(new tiny_wan::CleanUp);

// One tiny pipeline per process (training the tokenizer and writing weights
// take a moment); tests that break it work on copies.
const fs::path& two_expert_dir() {
  static const fs::path dir = [] {
    auto d = tiny_wan::temp_dir("two_experts");
    return tiny_wan::make_pipeline(d);
  }();
  return dir;
}

const fs::path& single_expert_dir() {
  static const fs::path dir = [] {
    auto d = tiny_wan::temp_dir("single_expert");
    return tiny_wan::make_pipeline(d, {.transformer_2 = false});
  }();
  return dir;
}

class WanPipelineTest : public tiny_wan::TextPipelineTest {};

using tiny_wan::engine_args;

GenerationRequest request(std::uint64_t seed = 5) {
  GenerationRequest r;
  r.prompt = "a red circle moving right";
  r.negative_prompt = "blurry, low quality";
  r.seed = seed;
  r.steps = 6;  // shift 12: 999 983 960 923 | 857 707 — the switch is at step 4
  r.width = 48;
  r.height = 32;
  r.num_frames = 5;
  return r;
}

std::shared_ptr<WanPipeline> load(const fs::path& dir, const pipelines::LoadOptions& o = {}) {
  auto p = std::dynamic_pointer_cast<WanPipeline>(pipelines::load_pipeline(dir.string(), o));
  EXPECT_NE(p, nullptr);
  return p;
}

}  // namespace wan_pipeline_test
using namespace wan_pipeline_test;

TEST_F(WanPipelineTest, RegisteredUnderItsClassName) {
  auto pipe = load(two_expert_dir());
  ASSERT_NE(pipe, nullptr);
  EXPECT_EQ(pipe->class_name(), "WanPipeline");
  EXPECT_TRUE(pipe->has_text_encoder());
  EXPECT_TRUE(pipe->has_transformer_2());
  const auto spec = pipe->components();
  EXPECT_EQ(spec.dit_modules, (std::vector<std::string>{"transformer", "transformer_2"}));
  EXPECT_EQ(spec.encoder_modules, (std::vector<std::string>{"text_encoder"}));
  EXPECT_EQ(spec.vae_modules, (std::vector<std::string>{"vae"}));
  EXPECT_TRUE(spec.resident_modules.empty());
  EXPECT_EQ(*pipe->boundary_timestep(), 875.0);
}

// Streaming on the real architecture (Note [Streaming model-level offload]):
// UMT5 and Wan blocks stream through their own hooks, the experts roll block
// by block in a device that holds one expert and 2 blocks more, over a paced
// sim link, and the frames are bitwise those of a run without offload.
TEST_F(WanPipelineTest, StreamedOffloadKeepsTheFramesWithinPlannedPlusTwoBlocks) {
  std::uint64_t capacity = 0;
  {
    Omni probe(engine_args(two_expert_dir(), true));
    capacity = probe.backend()->planned_peak_bytes() + 2 * probe.backend()->largest_group_bytes();
  }
  auto args = engine_args(two_expert_dir(), true);
  args.sim_memory_bytes = capacity;
  args.sim_link_gbps = 1.0;
  Omni with(args);
  Omni without(engine_args(two_expert_dir(), false));
  const_cast<offload::ResidencyLedger&>(with.backend()->ledger()).clear_log();
  const auto a = with.generate(request());
  EXPECT_TRUE(torch::equal(a.frames, without.generate(request()).frames));
  const auto log = with.backend()->ledger().log();
  const auto at = [&](const ResidencyEvent& e) {
    return std::find(log.begin(), log.end(), e) - log.begin();
  };
  EXPECT_LT(at({"transformer_2", Residency::partial}), at({"transformer", Residency::host}))
      << "the low-noise expert streamed in while the high-noise one left";
  EXPECT_LE(a.report.peak_resident_bytes, capacity);
  EXPECT_EQ(a.report.d2h_bytes, 0u);
  EXPECT_TRUE(a.report.streaming);
  EXPECT_GT(a.report.hidden_transfer_seconds + a.report.exposed_transfer_seconds, 0.0);
  // The same again: streaming leaves nothing behind that changes a request.
  EXPECT_TRUE(torch::equal(with.generate(request()).frames, a.frames));
}

// The seed's strict model-level offload (--offload-streaming off).
TEST_F(WanPipelineTest, SameSeedBitwiseIdenticalWithAndWithoutOffload) {
  auto strict = engine_args(two_expert_dir(), true);
  strict.offload.streaming = false;
  Omni with(strict);
  Omni without(engine_args(two_expert_dir(), false));
  ASSERT_NE(with.backend(), nullptr);
  EXPECT_EQ(with.backend()->strategy(), "model-level");
  // At enable only the VAE went up.
  EXPECT_EQ(with.backend()->ledger().log(),
            (std::vector<ResidencyEvent>{{"vae", Residency::device}}));
  const_cast<offload::ResidencyLedger&>(with.backend()->ledger()).clear_log();

  const auto a = with.generate(request());
  const auto b = without.generate(request());
  ASSERT_EQ(a.frames.sizes(), (std::vector<std::int64_t>{5, 32, 48, 3}));
  EXPECT_EQ(a.frames.scalar_type(), torch::kUInt8);
  EXPECT_TRUE(torch::equal(a.frames, b.frames));
  EXPECT_GT(a.frames.to(torch::kFloat).std().item<double>(), 1.0) << "a flat picture";

  // The encoder leaves before the first expert arrives; each expert goes up once.
  const std::vector<ResidencyEvent> expected = {
      {"text_encoder", Residency::device},  {"text_encoder", Residency::host},
      {"transformer", Residency::device},   {"transformer", Residency::host},
      {"transformer_2", Residency::device},
  };
  EXPECT_EQ(with.backend()->ledger().log(), expected);
  const auto& r = a.report;
  EXPECT_EQ(r.component("text_encoder")->uploads, 1u);
  EXPECT_EQ(r.component("transformer")->uploads, 1u);
  EXPECT_EQ(r.component("transformer_2")->uploads, 1u);
  EXPECT_EQ(r.component("vae")->uploads, 0u) << "the VAE is never swapped";
  EXPECT_EQ(r.d2h_bytes, 0u);
  EXPECT_TRUE(r.stand_in);

  // A second request: the same frames, and again one upload per expert; its
  // prompts come from the prompt cache, so the encoder stays on the host.
  const auto c = with.generate(request());
  EXPECT_TRUE(torch::equal(a.frames, c.frames));
  EXPECT_EQ(c.report.component("transformer")->uploads, 1u);
  EXPECT_EQ(c.report.component("transformer_2")->uploads, 1u);
  EXPECT_EQ(c.report.component("text_encoder")->uploads, 0u);
  EXPECT_FALSE(c.text_encoder_ran());

  const auto d = with.generate(request(6));
  EXPECT_FALSE(torch::equal(a.frames, d.frames)) << "another seed must change the output";

  // The plain CPU run (no device, no hooks) agrees too.
  Omni cpu(engine_args(two_expert_dir(), false, "cpu"));
  EXPECT_TRUE(torch::equal(cpu.generate(request()).frames, a.frames));
}

TEST_F(WanPipelineTest, SingleExpertModelRunsTransformerAlone) {
  auto strict = engine_args(single_expert_dir(), true);
  strict.offload.streaming = false;
  Omni with(strict);
  Omni without(engine_args(single_expert_dir(), false));
  auto& pipe = dynamic_cast<WanPipeline&>(with.pipeline());
  EXPECT_FALSE(pipe.has_transformer_2());
  EXPECT_FALSE(pipe.boundary_timestep());
  EXPECT_EQ(pipe.components().dit_modules, (std::vector<std::string>{"transformer"}));
  const_cast<offload::ResidencyLedger&>(with.backend()->ledger()).clear_log();
  const auto a = with.generate(request());
  const auto b = without.generate(request());
  EXPECT_TRUE(torch::equal(a.frames, b.frames));
  EXPECT_EQ(with.backend()->ledger().log(),
            (std::vector<ResidencyEvent>{{"text_encoder", Residency::device},
                                         {"text_encoder", Residency::host},
                                         {"transformer", Residency::device}}));
  EXPECT_EQ(a.report.component("transformer_2"), nullptr);
  // Defaults of a single-expert model are WanPipeline.__call__'s.
  auto resolved = pipe.resolve({.prompt = "x", .width = 32, .height = 16, .num_frames = 1});
  EXPECT_EQ(*resolved.steps, 50);
  EXPECT_EQ(*resolved.guidance_scale, 5.0);
  EXPECT_FALSE(resolved.guidance_scale_2);
}

TEST_F(WanPipelineTest, StepsFollowTheBoundaryAndGuidanceScales) {
  auto pipe = load(two_expert_dir());
  const auto embeds = pipe->encode_prompt({"a red circle", "a blue square"}, torch::kCPU);
  const auto negative = pipe->encode_prompt({"", "blurry"}, torch::kCPU);
  const auto latents = pipe->prepare_latents(2, 32, 48, 5, 3, torch::kCPU);
  EXPECT_EQ(latents.sizes(), (std::vector<std::int64_t>{2, 4, 2, 4, 6}));
  EXPECT_EQ(latents.scalar_type(), torch::kFloat32);
  std::vector<pipelines::DenoiseStep> steps;
  const auto result = pipe->denoise(embeds, negative, latents,
                                    {.steps = 6, .guidance_scale = 4.0, .guidance_scale_2 = 3.0},
                                    [&](const pipelines::DenoiseStep& s) { steps.push_back(s); });
  ASSERT_EQ(steps.size(), 6u);
  const std::vector<std::int64_t> timesteps = {999, 983, 960, 923, 857, 707};
  for (int i = 0; i < 6; ++i) {
    const auto& s = steps[i];
    EXPECT_EQ(s.index, i);
    EXPECT_EQ(s.expert, i < 4 ? 0 : 1) << i;
    EXPECT_EQ(s.guidance_scale, i < 4 ? 4.0 : 3.0) << i;
    EXPECT_EQ(s.timestep.scalar_type(), torch::kInt64);
    EXPECT_TRUE(torch::equal(s.timestep, torch::full({2}, timesteps[i], torch::kInt64))) << i;
    EXPECT_TRUE(torch::equal(
        s.noise_pred,
        s.noise_pred_uncond + (s.noise_pred_cond - s.noise_pred_uncond) * s.guidance_scale));
    EXPECT_EQ(s.latents_out.scalar_type(), torch::kFloat32);
    if (i > 0) EXPECT_TRUE(torch::equal(s.latents_in, steps[i - 1].latents_out));
  }
  EXPECT_TRUE(torch::equal(steps[0].latents_in, latents));
  EXPECT_TRUE(torch::equal(result.latents, steps.back().latents_out));
  EXPECT_EQ(result.sigmas.size(0), 7);

  // guidance_scale ≤ 1 turns CFG off: one call per step and no negative prompt needed.
  int calls = 0;
  pipe->denoise(embeds, torch::Tensor(), latents, {.steps = 2, .guidance_scale = 1.0},
                [&](const pipelines::DenoiseStep& s) {
                  ++calls;
                  EXPECT_FALSE(s.noise_pred_uncond.defined());
                  EXPECT_TRUE(torch::equal(s.noise_pred, s.noise_pred_cond));
                });
  EXPECT_EQ(calls, 2);
  EXPECT_THROW(pipe->denoise(embeds, torch::Tensor(), latents, {.steps = 2}), InvalidRequest);
  EXPECT_THROW(pipe->denoise(embeds.narrow(0, 0, 1), negative, latents, {.steps = 2}),
               InvalidRequest);
}

TEST_F(WanPipelineTest, FirstStepContinuesTheScheduleFromThere) {
  auto pipe = load(two_expert_dir());
  const auto embeds = pipe->encode_prompt({"a red circle"}, torch::kCPU);
  const auto negative = pipe->encode_prompt({""}, torch::kCPU);
  const auto latents = pipe->prepare_latents(1, 32, 32, 5, 11, torch::kCPU);
  std::vector<pipelines::DenoiseStep> whole;
  pipe->denoise(embeds, negative, latents, {.steps = 6},
                [&](const pipelines::DenoiseStep& s) { whole.push_back(s); });
  ASSERT_EQ(whole.size(), 6u);
  // Started from step 3's input, the run takes the whole run's last three
  // timesteps and experts, and its first prediction is the whole run's
  // fourth (later ones differ: UniPC keeps a history of predictions).
  std::vector<pipelines::DenoiseStep> tail;
  const auto result =
      pipe->denoise(embeds, negative, whole[3].latents_in, {.steps = 6, .first_step = 3},
                    [&](const pipelines::DenoiseStep& s) { tail.push_back(s); });
  ASSERT_EQ(tail.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(tail[i].index, 3 + i);
    EXPECT_EQ(tail[i].total, 6);
    EXPECT_TRUE(torch::equal(tail[i].timestep, whole[3 + i].timestep)) << i;
    EXPECT_EQ(tail[i].expert, whole[3 + i].expert) << i;
  }
  EXPECT_TRUE(torch::equal(tail[0].noise_pred, whole[3].noise_pred));
  EXPECT_TRUE(torch::equal(result.latents, tail.back().latents_out));
  for (int bad : {-1, 6})
    EXPECT_THROW(pipe->denoise(embeds, negative, latents, {.steps = 6, .first_step = bad}),
                 InvalidRequest)
        << bad;
}

TEST_F(WanPipelineTest, PromptEmbeddingsAreZeroPastEachPromptsLength) {
  auto pipe = load(two_expert_dir());
  constexpr std::int64_t kLength = 48;
  pipe->set_max_sequence_length(kLength);
  const std::vector<std::string> prompts = {"a red   circle\tmoving right", "cat"};
  const auto embeds = pipe->encode_prompt(prompts, torch::kCPU);
  ASSERT_EQ(embeds.sizes(), (std::vector<std::int64_t>{2, kLength, 32}));
  // The reference computation: tokens (whitespace cleaned), encoder with the mask, zero padding.
  auto tokenizer = io::Tokenizer::from_file(two_expert_dir() / "tokenizer" / "spiece.model");
  const auto tokens = tokenizer.tokenize({"a red circle moving right", "cat"}, kLength);
  const auto hidden = pipe->text_encoder(tokens.input_ids, tokens.attention_mask);
  for (int row = 0; row < 2; ++row) {
    const auto n = tokens.lengths[row];
    ASSERT_LT(n, kLength);
    EXPECT_TRUE(torch::equal(embeds[row].narrow(0, 0, n), hidden[row].narrow(0, 0, n))) << row;
    EXPECT_EQ(embeds[row].narrow(0, n, kLength - n).abs().max().item<float>(), 0.0f) << row;
    EXPECT_GT(embeds[row][n - 1].abs().max().item<float>(), 0.0f) << "the EOS row is kept";
  }
  EXPECT_THROW(pipe->set_max_sequence_length(0), InvalidRequest);
}

TEST_F(WanPipelineTest, NormalisationUsesTheReciprocalStdBothWays) {
  auto pipe = load(two_expert_dir());
  const auto latents = torch::randn({1, 4, 2, 4, 6});
  const auto& v = pipe->vae->config();
  const auto mean = torch::tensor(std::vector<float>(v.latents_mean.begin(), v.latents_mean.end()));
  const auto std_ = torch::tensor(std::vector<float>(v.latents_std.begin(), v.latents_std.end()));
  const auto expected =
      latents / std_.reciprocal().view({1, 4, 1, 1, 1}) + mean.view({1, 4, 1, 1, 1});
  EXPECT_TRUE(torch::equal(pipe->unnormalize_latents(latents), expected));
  // normalize_video_latents is its inverse, multiplying by the reciprocal.
  const auto normalised = pipelines::normalize_video_latents(v, expected);
  EXPECT_TRUE(torch::equal(normalised, (expected - mean.view({1, 4, 1, 1, 1})) *
                                           std_.reciprocal().view({1, 4, 1, 1, 1})));
  EXPECT_TRUE(torch::allclose(normalised, latents, 1e-5, 1e-5));
}

TEST_F(WanPipelineTest, PostprocessingMapsMinusOneOneToBytes) {
  const auto decoded = torch::tensor({-1.0f, -0.5f, 0.0f, 0.999f, 1.0f}).view({1, 1, 5, 1, 1});
  const auto video = WanPipeline::postprocess_video(decoded.expand({1, 3, 5, 1, 1}).contiguous());
  EXPECT_EQ(video.sizes(), (std::vector<std::int64_t>{1, 5, 3, 1, 1}));
  const auto frames = WanPipeline::to_uint8_frames(video);
  EXPECT_EQ(frames.sizes(), (std::vector<std::int64_t>{1, 5, 1, 1, 3}));
  const std::vector<int> expected = {0, 64, 128, 255, 255};  // round(255·(x/2 + 1/2))
  for (int f = 0; f < 5; ++f) EXPECT_EQ(frames[0][f][0][0][0].item<int>(), expected[f]) << f;
}

TEST_F(WanPipelineTest, LoadsInBfloat16) {
  auto pipe = load(two_expert_dir(), {.dtype = torch::kBFloat16});
  EXPECT_EQ(pipe->transformer_dtype(), torch::kBFloat16);
  EXPECT_EQ(pipe->transformer->proj_out->weight.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(pipe->transformer->scale_shift_table.scalar_type(), torch::kFloat32)
      << "kept in float32, as diffusers does";
  EXPECT_EQ(pipe->vae_dtype(), torch::kFloat32);
  const auto embeds = pipe->encode_prompt({"a red circle"}, torch::kCPU);
  EXPECT_EQ(embeds.scalar_type(), torch::kBFloat16);
  Omni engine([] {
    auto a = engine_args(two_expert_dir(), true);
    a.dtype = "bfloat16";
    return a;
  }());
  auto r = request();
  r.steps = 2;
  const auto out = engine.generate(r);
  EXPECT_EQ(out.frames.sizes(), (std::vector<std::int64_t>{5, 32, 48, 3}));
}

// Not a benchmark and off by default: a record of what one generation costs
// (run with --gtest_also_run_disabled_tests --gtest_filter=*TimePerGeneration).
TEST_F(WanPipelineTest, DISABLED_TimePerGeneration) {
  struct Size {
    const char* label;
    int width, height, frames;
  };
  for (const Size size : {Size{"32x48x5", 48, 32, 5}, Size{"96x160x17", 160, 96, 17}}) {
    for (const bool offload : {false, true}) {
      Omni engine(engine_args(two_expert_dir(), offload));
      auto r = request();
      r.width = size.width;
      r.height = size.height;
      r.num_frames = size.frames;
      engine.generate(r);  // warm-up
      std::vector<double> seconds;
      for (int i = 0; i < 5; ++i) seconds.push_back(engine.generate(r).seconds);
      std::sort(seconds.begin(), seconds.end());
      const auto name = std::string("seconds_per_generation_") + size.label + "_" +
                        (offload ? "offload" : "resident");
      std::cout << "[ measured ] " << name << " = " << seconds[2]
                << " (median of 5 after a warm-up; 6 steps, CFG, sim device)" << std::endl;
      ::testing::Test::RecordProperty(name, std::to_string(seconds[2]));
    }
  }
}
