// The trainer end to end: `omni-train --smoke` writes a directory that the
// ordinary loader reads and that generates a frame; and, when
// models/tiny-shapes(-unified) are present, the quality bar measured on them.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "evaluation.h"
#include "offload_expectations.h"
#include "omni/omni.h"
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

  // Note [Denoising a drawn clip]: from sigma 1 it is the pipeline's own
  // generation, frame for frame; from lower noise it denoises fewer steps.
  EvalOptions eval;
  eval.steps = 3;
  eval.num_frames = 1;
  const auto cases = evaluation_cases(1);
  const auto generated = evaluate_model(*pipe, cases, eval);
  const auto from_noise = evaluate_from_noised(*pipe, cases, eval, 1.0);
  ASSERT_EQ(from_noise.cases.size(), generated.cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i)
    EXPECT_TRUE(torch::equal(from_noise.cases[i].frames, generated.cases[i].frames)) << i;
  const auto from_half = evaluate_from_noised(*pipe, cases, eval, 0.5);
  EXPECT_EQ(from_half.cases[0].frames.sizes(), generated.cases[0].frames.sizes());
  EXPECT_FALSE(torch::equal(from_half.cases[0].frames, generated.cases[0].frames));
  EXPECT_THROW(evaluate_from_noised(*pipe, cases, eval, 0.0), std::invalid_argument);
  EXPECT_THROW(evaluate_from_noised(*pipe, cases, eval, 1.5), std::invalid_argument);
  fs::remove_all(dir);
  fs::remove(dir.string() + ".log");
}

struct Floors {
  double foreground, background, shape, motion;
};

// Prints the report and checks each split's rates against its floors.
void expect_floors(const EvalResult& result, const Floors& seen, const Floors& held_out) {
  std::cout << format_report(result);
  for (const auto& [tally, f] :
       {std::pair{&result.seen, seen}, std::pair{&result.held_out, held_out}}) {
    SCOPED_TRACE(tally == &result.seen ? "seen" : "held-out");
    EXPECT_GE(tally->rate(tally->foreground), f.foreground);
    EXPECT_GE(tally->rate(tally->background), f.background);
    EXPECT_GE(tally->rate(tally->shape), f.shape);
    EXPECT_GE(tally->rate(tally->motion), f.motion);
  }
}

fs::path shipped(const char* name) {
  return fs::path(OMNI_SOURCE_DIR) / "models" / name;
}

// The probe flags (Note [Contrasting the shape word] in trainer.cpp): a
// smoke run fine-tunes another smoke run's experts with the shape-word
// contrast, and refuses experts of other sizes.
TEST(Train, SmokeRunFineTunesWithTheShapeContrast) {
  const auto base = fs::temp_directory_path() / ("omni_train_probe_" + std::to_string(::getpid()));
  fs::remove_all(base);
  const auto run = [&](const std::string& name, const std::string& flags) {
    const auto dir = base / name;
    fs::create_directories(base);
    const std::string command = std::string("'") + OMNI_TRAIN_BINARY + "' --smoke '" +
                                dir.string() + "' " + flags + " > '" + dir.string() + ".log' 2>&1";
    const int status = std::system(command.c_str());
    std::ifstream log(dir.string() + ".log");
    std::stringstream text;
    text << log.rdbuf();
    return std::pair{WEXITSTATUS(status), text.str()};
  };
  ASSERT_EQ(run("first", "").first, 0);
  const auto first = (base / "first").string();
  const auto [status, log] = run(
      "tuned", "--vae-from '" + first + "' --experts-from '" + first + "' --dit-shape-contrast 1");
  ASSERT_EQ(status, 0) << log;
  EXPECT_NE(log.find("start from " + first), std::string::npos) << log;
  EXPECT_NE(log.find("contrast "), std::string::npos) << log;
  EXPECT_TRUE(fs::is_regular_file(base / "tuned" / "transformer_2" /
                                  "diffusion_pytorch_model.safetensors"));
  // The shipped model's experts are not the smoke recipe's size.
  const auto [refused, why] = run("refused", "--vae-from '" + first + "' --experts-from '" +
                                                 shipped("tiny-shapes").string() + "'");
  EXPECT_EQ(refused, 1) << why;
  EXPECT_NE(why.find("sizes differ"), std::string::npos) << why;
  fs::remove_all(base);
}

// The quality measure on the shipped model (12 seen + 12 held-out prompts,
// fixed seeds, the pipeline's default sampling: 40 steps, guidance 4 / 3).
// The bar is foreground and background >= 90%, shape and direction
// >= 80%, held-out included; the shipped model does NOT reach it yet
// (measured 2026-12-06 on this set: seen fg 100%, bg 100%, shape 50.0%,
// direction 91.7%; held-out fg 100%, bg 100%, shape 41.7%, direction 100%;
// docs/tiny-shapes.md). So this test prints the report and guards only
// against regressions, one clip below those rates; raise the floors with the
// model. The full 24 + 24 set is `omni-quality models/tiny-shapes`.
TEST(Train, ShippedModelQuality) {
  const auto model = shipped("tiny-shapes");
  if (!fs::is_regular_file(model / "model_index.json")) GTEST_SKIP() << model << " is absent";
  configure_cpu(2);
  auto pipe = pipelines::load_pipeline(model.string());
  expect_floors(evaluate_model(*pipe, evaluation_cases(12), {}), {0.9, 0.9, 0.41, 0.83},
                {0.9, 0.9, 0.33, 0.9});
}

// The bundled split model (OmniUnifiedPipeline): the same measure, floors
// one clip below what it measured (2026-12-03: seen fg 100%, bg 100%, shape
// 50.0%, direction 83.3%; held-out 100%, 100%, 41.7%, 83.3%;
// docs/tiny-shapes.md): it meets the colour bar, not the shape bar; and
// what `omni generate models/tiny-shapes-unified --enable-cpu-offload`
// promises: the reasoner uploaded once and the generator once per request,
// and the frames bitwise those of a run without offload.
TEST(Train, ShippedUnifiedModel) {
  const auto model = shipped("tiny-shapes-unified");
  if (!fs::is_regular_file(model / "model_index.json")) GTEST_SKIP() << model << " is absent";
  configure_cpu(2);
  auto pipe = pipelines::load_pipeline(model.string());
  ASSERT_EQ(pipe->class_name(), "OmniUnifiedPipeline");
  expect_floors(evaluate_model(*pipe, evaluation_cases(12), {}), {0.9, 0.9, 0.4, 0.75},
                {0.9, 0.9, 0.33, 0.75});

  pipelines::GenerationRequest request;
  request.prompt = "a yellow square moving right on a gray background";
  request.seed = 11;
  torch::Tensor frames;
  {
    torch::InferenceMode inference;
    frames = pipe->run(pipe->resolve(request), {}).frames;
  }
  expect_split_offload_matches(model, request, frames, 2);
}

}  // namespace
}  // namespace omni::train
