// The prompt cache through the engine (Note [Prompt cache]): a repeated
// prompt skips the text encoder and its upload, and the output is bitwise
// the same as with the cache off; on the built-in example and on a real
// WanPipeline directory (models/tiny-shapes).
#include <gtest/gtest.h>

#include <torch/torch.h>
#include "omni/io/tokenizer.h"

#include <filesystem>

#include "omni/omni.h"

namespace omni {
namespace {

bool uploaded(const offload::OffloadReport& report, const std::string& component) {
  for (const auto& t : report.transfers)
    if (t.component == component) return true;
  return false;
}

void expect_cache_skips_encoder(const std::string& model, GenerationRequest request) {
  SCOPED_TRACE(model);
  EngineArgs args;
  args.model = model;
  args.enable_cpu_offload = true;
  args.device = "sim";
  Omni cached(args);
  args.prompt_cache_bytes = 0;
  Omni uncached(args);

  const auto first = cached.generate(request);
  EXPECT_TRUE(first.text_encoder_ran());
  EXPECT_EQ(first.prompt_cache_hits, 0u);
  EXPECT_EQ(first.prompt_cache_misses, 2u);  // the prompt and the negative prompt
  EXPECT_TRUE(uploaded(first.report, "text_encoder"));

  const auto second = cached.generate(request);
  EXPECT_FALSE(second.text_encoder_ran());
  EXPECT_EQ(second.prompt_cache_hits, 2u);
  EXPECT_FALSE(uploaded(second.report, "text_encoder")) << "a hit must not upload the encoder";
  EXPECT_TRUE(torch::equal(first.frames, second.frames));

  const auto reference = uncached.generate(request);
  EXPECT_TRUE(reference.text_encoder_ran());
  EXPECT_TRUE(torch::equal(second.frames, reference.frames)) << "not bitwise the same";
  EXPECT_EQ(uncached.prompt_cache_stats().entries, 0u);

  // Only the prompt changes: the shared negative prompt still hits.
  request.prompt += " and a square";
  const auto third = cached.generate(request);
  EXPECT_EQ(third.prompt_cache_hits, 1u);
  EXPECT_EQ(third.prompt_cache_misses, 1u);
  EXPECT_TRUE(torch::equal(third.frames, uncached.generate(request).frames));
  const auto stats = cached.prompt_cache_stats();
  EXPECT_EQ(stats.hits, 3u);
  EXPECT_EQ(stats.misses, 3u);
  EXPECT_GT(stats.bytes, 0u);
}

TEST(PromptCacheEngine, TheBuiltInExample) {
  GenerationRequest r;
  r.prompt = "a red circle";
  r.negative_prompt = "blurry";
  r.steps = 2;
  r.width = 32;
  r.height = 32;
  r.num_frames = 1;
  r.seed = 3;
  expect_cache_skips_encoder("example:wan-shaped", r);
}

TEST(PromptCacheEngine, AWanPipelineDirectory) {
  if (!omni::io::Tokenizer::available()) GTEST_SKIP() << "built without OMNI_WITH_TOKENIZER";
  const auto dir = std::filesystem::path(OMNI_SOURCE_DIR) / "models" / "tiny-shapes";
  ASSERT_TRUE(std::filesystem::exists(dir / "model_index.json")) << dir;
  GenerationRequest r;
  r.prompt = "a red circle moving right on a black background";
  r.steps = 2;
  r.num_frames = 1;
  r.seed = 7;
  r.guidance_scale = 4.0;  // CFG on: the negative prompt is encoded too
  expect_cache_skips_encoder(dir.string(), r);
}

}  // namespace
}  // namespace omni
