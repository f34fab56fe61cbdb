// The trainer end to end: `omni-train --smoke` writes a directory that the
// ordinary loader reads and that generates a frame; and, when
// models/tiny-shapes is present, the quality bar measured on it.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "evaluation.h"
#include "omni/pipelines/pipeline.h"
#include "trainer.h"

namespace fs = std::filesystem;

namespace omni::train {
namespace {

TEST(Train, SmokeRunWritesALoadableModel) {
  const auto dir = fs::temp_directory_path() / ("omni_train_smoke_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const std::string command = std::string("'") + OMNI_TRAIN_BINARY + "' --smoke '" + dir.string() +
                              "' > '" + dir.string() + ".log' 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << "see " << dir.string() << ".log";
  for (const char* file :
       {"model_index.json", "tokenizer/spiece.model", "text_encoder/config.json",
        "text_encoder/model.safetensors", "transformer/diffusion_pytorch_model.safetensors",
        "transformer_2/diffusion_pytorch_model.safetensors",
        "vae/diffusion_pytorch_model.safetensors", "scheduler/scheduler_config.json"})
    EXPECT_TRUE(fs::is_regular_file(dir / file)) << file;

  auto pipe = pipelines::load_pipeline(dir.string());
  EXPECT_EQ(pipe->class_name(), "WanPipeline");
  torch::NoGradGuard no_grad;
  pipelines::GenerationRequest request;
  request.prompt = "a red circle moving right on a black background";
  request.seed = 7;
  request.width = 64;
  request.height = 64;
  request.num_frames = 1;
  request.steps = 2;
  const auto out = pipe->run(pipe->resolve(request), {});
  EXPECT_EQ(out.frames.sizes(), (std::vector<std::int64_t>{1, 64, 64, 3}));
  EXPECT_EQ(out.frames.scalar_type(), torch::kUInt8);
  fs::remove_all(dir);
  fs::remove(dir.string() + ".log");
}

// The quality measure on the shipped model (12 seen + 12 held-out prompts,
// fixed seeds, the pipeline's default sampling: 40 steps, guidance 4 / 3).
// The bar is foreground and background >= 90%, shape and direction
// >= 80%, held-out included; the shipped model does NOT reach it yet
// (measured 2026-12-03 on this set: seen fg 91.7%, bg 100%, shape 50.0%,
// direction 75.0%; held-out fg 66.7%, bg 100%, shape 41.7%, direction 83.3%;
// docs/tiny-shapes.md). So this test prints the report and guards only
// against regressions, one clip below those rates; raise the floors with the
// model. The full 24 + 24 set is `omni-quality models/tiny-shapes`.
TEST(Train, ShippedModelQuality) {
  const fs::path model = fs::path(OMNI_SOURCE_DIR) / "models" / "tiny-shapes";
  if (!fs::is_regular_file(model / "model_index.json")) GTEST_SKIP() << model << " is absent";
  configure_cpu(2);
  auto pipe = pipelines::load_pipeline(model.string());
  const auto result = evaluate_model(*pipe, evaluation_cases(12), {});
  std::cout << format_report(result);
  struct Floor {
    const QualityTally* tally;
    double foreground, background, shape, motion;
  };
  for (const auto& f :
       {Floor{&result.seen, 0.8, 0.9, 0.4, 0.65}, Floor{&result.held_out, 0.55, 0.9, 0.3, 0.7}}) {
    const auto& t = *f.tally;
    EXPECT_GE(t.rate(t.foreground), f.foreground);
    EXPECT_GE(t.rate(t.background), f.background);
    EXPECT_GE(t.rate(t.shape), f.shape);
    EXPECT_GE(t.rate(t.motion), f.motion);
  }
}

}  // namespace
}  // namespace omni::train
