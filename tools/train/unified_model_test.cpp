// The unified trainer end to end: `omni-train --smoke` makes a smoke VAE,
// `omni-train --smoke --unified --vae-from` trains the split model from it,
// and the result loads with the ordinary loader, generates with and without
// model-level offload, and can be measured by omni-quality's code; a second
// run fine-tunes it with the shape-word contrast (--experts-from).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "evaluation.h"
#include "offload_expectations.h"
#include "omni/omni.h"
#include "omni/pipelines/omni_unified_pipeline.h"
#include "omni/pipelines/pipeline.h"
#include "unified_trainer.h"

namespace fs = std::filesystem;

namespace omni::train {
namespace {

int run_train(const std::string& arguments, const fs::path& log) {
  const std::string command =
      std::string("'") + OMNI_TRAIN_BINARY + "' " + arguments + " > '" + log.string() + "' 2>&1";
  return WEXITSTATUS(std::system(command.c_str()));
}

std::string unified_file_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(TrainUnified, SmokeRunFromASmokeVaeWritesALoadableModel) {
  const auto base =
      fs::temp_directory_path() / ("omni_train_unified_" + std::to_string(::getpid()));
  fs::remove_all(base);
  fs::create_directories(base);
  const auto vae_model = base / "vae_model";
  const auto out = base / "unified";
  ASSERT_EQ(run_train("--smoke '" + vae_model.string() + "'", base / "vae.log"), 0)
      << "see " << base / "vae.log";
  EXPECT_EQ(run_train("--smoke --unified '" + out.string() + "'", base / "no_vae.log"), 2)
      << "--unified without --vae-from must be refused";
  ASSERT_EQ(
      run_train("--smoke --unified --vae-from '" + vae_model.string() + "' '" + out.string() + "'",
                base / "unified.log"),
      0)
      << "see " << base / "unified.log";
  for (const char* file : {"model_index.json", "tokenizer/spiece.model", "transformer/config.json",
                           "transformer/diffusion_pytorch_model.safetensors", "vae/config.json",
                           "vae/diffusion_pytorch_model.safetensors",
                           "scheduler/scheduler_config.json", "omni_defaults.json"})
    EXPECT_TRUE(fs::is_regular_file(out / file)) << file;
  EXPECT_FALSE(fs::exists(out / "text_encoder"));
  EXPECT_FALSE(fs::exists(out / "transformer_2"));
  // The VAE is the smoke model's, not retrained.
  EXPECT_EQ(fs::file_size(out / "vae/diffusion_pytorch_model.safetensors"),
            fs::file_size(vae_model / "vae/diffusion_pytorch_model.safetensors"));

  auto pipe = pipelines::load_pipeline(out.string());
  ASSERT_EQ(pipe->class_name(), "OmniUnifiedPipeline");
  pipelines::GenerationRequest request;
  request.prompt = "a red circle moving right on a black background";
  request.seed = 7;
  request.num_frames = 1;
  request.steps = 2;
  torch::Tensor frames;
  {
    torch::NoGradGuard no_grad;
    frames = pipe->run(pipe->resolve(request), {}).frames;
  }
  EXPECT_EQ(frames.sizes(), (std::vector<std::int64_t>{1, 64, 64, 3}));
  EXPECT_EQ(frames.scalar_type(), torch::kUInt8);

  // With model-level offload on the sim device: the same frames, one upload each.
  expect_split_offload_matches(out, request, frames, 1);

  // omni-quality's measuring code takes the unified directory too.
  EvalOptions eval;
  eval.steps = 1;
  eval.num_frames = 1;
  const auto generated = evaluate_model(*pipe, evaluation_cases(1), eval);
  EXPECT_EQ(generated.seen.clips + generated.held_out.clips, 2);
  const auto reconstructed = evaluate_reconstruction(*pipe, evaluation_cases(1));
  EXPECT_EQ(reconstructed.cases.size(), 2u);

  // A fine-tune from it with the shape-word contrast; a model of other sizes
  // is refused before its first step.
  const auto tuned = base / "tuned";
  ASSERT_EQ(run_train("--smoke --unified --vae-from '" + vae_model.string() + "' --experts-from '" +
                          out.string() + "' --dit-shape-contrast 1 --log-every 1 '" +
                          tuned.string() + "'",
                      base / "tuned.log"),
            0)
      << "see " << base / "tuned.log";
  const auto tuned_log = unified_file_text(base / "tuned.log");
  EXPECT_TRUE(tuned_log.find("start from " + out.string()) != std::string::npos) << tuned_log;
  EXPECT_TRUE(tuned_log.find("contrast ") != std::string::npos) << tuned_log;
  EXPECT_NE(unified_file_text(tuned / "transformer/diffusion_pytorch_model.safetensors"),
            unified_file_text(out / "transformer/diffusion_pytorch_model.safetensors"));
  EXPECT_EQ(run_train("--smoke --unified --vae-from '" + vae_model.string() + "' --experts-from '" +
                          (fs::path(OMNI_SOURCE_DIR) / "models" / "tiny-shapes-unified").string() +
                          "' '" + (base / "refused").string() + "'",
                      base / "refused.log"),
            1);
  EXPECT_TRUE(unified_file_text(base / "refused.log").find("sizes differ") != std::string::npos)
      << unified_file_text(base / "refused.log");
  fs::remove_all(base);
}

}  // namespace
}  // namespace omni::train
