// A tiny random WanPipeline in diffusers layout, written to a temporary
// folder: model_index.json, text_encoder/ (UMT5, sharded with an index like
// the real checkpoint), tokenizer/spiece.model (trained here with spm_train),
// transformer/ and transformer_2/ (different weights), vae/, scheduler/.
// Component configs come from the reference fixtures (tests/data/wan).
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include "omni/io/checkpoint.h"
#include "omni/io/json_config.h"
#include "omni/io/safetensors.h"
#include "omni/models/wan/autoencoder_kl_wan.h"
#include "omni/models/wan/umt5_encoder.h"
#include "omni/models/wan/wan_transformer.h"
#include "omni/omni.h"

namespace tiny_wan {

namespace fs = std::filesystem;
using omni::models::wan::AutoencoderKLWan;
using omni::models::wan::AutoencoderKLWanConfig;
using omni::models::wan::UMT5Config;
using omni::models::wan::UMT5EncoderModel;
using omni::models::wan::WanTransformer3DConfig;
using omni::models::wan::WanTransformer3DModel;

inline fs::path data(const std::string& path) {
  return fs::path(OMNI_TEST_DATA) / "wan" / path;
}

inline void write_json(const fs::path& path, const nlohmann::json& json) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << json.dump(2) << "\n";
}

// Every folder the pipeline tests write lives under one per-process root,
// removed when the test program ends (CleanUp, registered once in
// wan_pipeline_test.cpp) unless OMNI_KEEP_TEST_DIRS is set.
inline fs::path process_root() {
  return fs::temp_directory_path() / ("omni_pipelines_tests_" + std::to_string(::getpid()));
}

class CleanUp : public ::testing::Environment {
 public:
  void TearDown() override {
    if (std::getenv("OMNI_KEEP_TEST_DIRS")) {
      std::cout << "kept " << process_root() << " (OMNI_KEEP_TEST_DIRS)\n";
      return;
    }
    std::error_code ignored;
    fs::remove_all(process_root(), ignored);
  }
};

// A fresh, empty folder under process_root(), named after the test.
inline fs::path temp_dir(const std::string& tag) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const auto dir =
      process_root() /
      ((info ? std::string(info->test_suite_name()) + "_" + info->name() : "suite") + "_" + tag);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

inline bool have_spm_train() {
  return std::system("command -v spm_train > /dev/null 2>&1") == 0;
}

// A fixture that skips its tests where text prompts cannot be tokenized (no
// SentencePiece in this build, or no spm_train to make a tokenizer).
class TextPipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!omni::io::Tokenizer::available()) GTEST_SKIP() << "built without OMNI_WITH_TOKENIZER";
    if (!have_spm_train()) GTEST_SKIP() << "spm_train (Debian: sentencepiece) not found";
  }
};

// Engine arguments for `model` on `device` (the sim stand-in by default), quiet.
inline omni::EngineArgs engine_args(const fs::path& model, bool offload,
                                    const std::string& device = "sim") {
  omni::EngineArgs args;
  args.model = model.string();
  args.enable_cpu_offload = offload;
  args.device = device;
  args.offload.quiet = true;
  return args;
}

// A small request for the tiny models: `steps` steps of a `width` × `height`
// clip of `frames` frames.
inline omni::GenerationRequest small_request(int steps, int width, int height, int frames,
                                             std::uint64_t seed = 0) {
  omni::GenerationRequest r;
  r.prompt = "a red circle";
  r.steps = steps;
  r.width = width;
  r.height = height;
  r.num_frames = frames;
  r.seed = seed;
  return r;
}

// Trains a SentencePiece model with T5's special ids (pad 0, eos 1, unk 2, no
// bos) on a handful of sentences; returns the .model path.
inline fs::path train_spiece(const fs::path& dir) {
  fs::create_directories(dir);
  const auto corpus = dir / "corpus.txt";
  std::ofstream(corpus) << "a red circle moving right\n"
                           "a blue square moving left across the frame\n"
                           "the cat sat on the mat in the sun\n"
                           "a green triangle spins slowly over a white floor\n"
                           "blurry, low quality, static, overexposed\n"
                           "two dogs run along the beach at sunset\n";
  const std::string command = "spm_train --input='" + corpus.string() + "' --model_prefix='" +
                              (dir / "spiece").string() +
                              "' --vocab_size=60 --hard_vocab_limit=false --model_type=unigram "
                              "--character_coverage=1.0 --pad_id=0 --eos_id=1 --unk_id=2 "
                              "--bos_id=-1 --minloglevel=2 > '" +
                              (dir / "spm_train.log").string() + "' 2>&1";
  EXPECT_EQ(std::system(command.c_str()), 0) << "spm_train failed; see " << dir / "spm_train.log";
  fs::remove(dir / "spiece.vocab");
  fs::remove(corpus);
  return dir / "spiece.model";
}

// The fixtures' initialisation (tests/data/wan/README.md): matrices
// N(0, clip(1/√fan_in, 0.02, 0.1)²), biases N(0, 0.05²), norm weights 1 + N(0, 0.1²).
inline void randomize(torch::nn::Module& module, std::uint64_t seed, double output_scale = 1.0) {
  torch::NoGradGuard no_grad;
  auto generator = at::detail::createCPUGenerator(seed);
  for (auto& item : module.named_parameters()) {
    auto& p = item.value();
    const auto& name = item.key();
    torch::Tensor value;
    const bool norm_weight = name.ends_with("gamma") || (p.dim() == 1 && !name.ends_with("bias"));
    if (norm_weight) {
      value = 1 + torch::randn(p.sizes(), generator, torch::kFloat32) * 0.1;
    } else if (p.dim() >= 2) {
      const double fan_in = static_cast<double>(p.numel() / p.size(0));
      const double sigma = std::clamp(1.0 / std::sqrt(fan_in), 0.02, 0.1);
      value = torch::randn(p.sizes(), generator, torch::kFloat32) * sigma;
    } else {
      value = torch::randn(p.sizes(), generator, torch::kFloat32) * 0.05;
    }
    if (name == "decoder.conv_out.weight") value = value * output_scale;
    p.copy_(value);
  }
}

inline void save_module(const torch::nn::Module& module, const fs::path& file,
                        const std::vector<std::string>& skip_buffers = {}) {
  fs::create_directories(file.parent_path());
  omni::io::save_safetensors(file, omni::io::named_state(module, skip_buffers));
}

// Two shards plus `<stem>.safetensors.index.json`, as the real text encoder.
inline void save_sharded(const torch::nn::Module& module, const fs::path& dir,
                         const std::string& stem) {
  fs::create_directories(dir);
  const auto state = omni::io::named_state(module);
  const auto half = state.size() / 2;
  const std::string shard_1 = stem + "-00001-of-00002.safetensors";
  const std::string shard_2 = stem + "-00002-of-00002.safetensors";
  std::vector<std::pair<std::string, torch::Tensor>> a(state.begin(), state.begin() + half),
      b(state.begin() + half, state.end());
  omni::io::save_safetensors(dir / shard_1, a);
  omni::io::save_safetensors(dir / shard_2, b);
  nlohmann::json index;
  index["metadata"] = {{"total_size", 0}};
  for (const auto& [name, t] : a) index["weight_map"][name] = shard_1;
  for (const auto& [name, t] : b) index["weight_map"][name] = shard_2;
  write_json(dir / (stem + ".safetensors.index.json"), index);
}

struct Options {
  bool transformer_2 = true;  // false: a Wan2.1-style single expert (boundary_ratio null)
  bool text_encoder = true;   // false: no text_encoder / tokenizer (embeddings only)
  std::uint64_t seed = 1234;
  // The dtype the experts and the text encoder are saved in (the VAE stays
  // float32, as in Wan2.2). bfloat16 experts are saved as diffusers saves
  // them: the modules the model keeps in float32 stay float32 in the file.
  torch::ScalarType stored_dtype = torch::kFloat32;
};

// Writes the pipeline into `dir` and returns it.
inline fs::path make_pipeline(const fs::path& dir, const Options& options = {}) {
  nlohmann::json index = {{"_class_name", "WanPipeline"},
                          {"_diffusers_version", "0.35.0.dev0"},
                          {"boundary_ratio", nullptr},
                          {"expand_timesteps", false},
                          {"scheduler", {"diffusers", "UniPCMultistepScheduler"}},
                          {"text_encoder", {nullptr, nullptr}},
                          {"tokenizer", {nullptr, nullptr}},
                          {"transformer", {"diffusers", "WanTransformer3DModel"}},
                          {"vae", {"diffusers", "AutoencoderKLWan"}}};
  const auto t_config_json = omni::io::read_json_file(data("wan_pipeline/transformer/config.json"));
  const auto t_config = WanTransformer3DConfig::from_json(t_config_json, "transformer");
  {
    WanTransformer3DModel t(t_config);
    randomize(*t, options.seed + 1);
    t->to_inference_dtype(options.stored_dtype);
    write_json(dir / "transformer" / "config.json", t_config_json);
    save_module(*t, dir / "transformer" / "diffusion_pytorch_model.safetensors",
                omni::models::wan::WanTransformer3DModelImpl::non_persistent_buffers());
  }
  if (options.transformer_2) {
    WanTransformer3DModel t(t_config);
    randomize(*t, options.seed + 2);
    t->to_inference_dtype(options.stored_dtype);
    write_json(dir / "transformer_2" / "config.json", t_config_json);
    save_module(*t, dir / "transformer_2" / "diffusion_pytorch_model.safetensors",
                omni::models::wan::WanTransformer3DModelImpl::non_persistent_buffers());
    index["transformer_2"] = {"diffusers", "WanTransformer3DModel"};
    index["boundary_ratio"] = 0.875;
  }
  {
    const auto v_json = omni::io::read_json_file(data("wan_pipeline/vae/config.json"));
    AutoencoderKLWan vae(AutoencoderKLWanConfig::from_json(v_json, "vae"));
    randomize(*vae, options.seed + 3, /*output_scale=*/0.5);
    write_json(dir / "vae" / "config.json", v_json);
    save_module(*vae, dir / "vae" / "diffusion_pytorch_model.safetensors");
  }
  if (options.text_encoder) {
    const auto e_json = omni::io::read_json_file(data("umt5_encoder/config.json"));
    UMT5EncoderModel te(UMT5Config::from_json(e_json, "text_encoder"));
    randomize(*te, options.seed + 4);
    te->to(options.stored_dtype);
    if (options.stored_dtype != torch::kFloat32)  // as transformers keeps them
      for (const auto& item : te->named_modules())
        if (item.key().ends_with(".wo")) item.value()->to(torch::kFloat);
    write_json(dir / "text_encoder" / "config.json", e_json);
    save_sharded(*te, dir / "text_encoder", "model");
    train_spiece(dir / "tokenizer");
    write_json(dir / "tokenizer" / "tokenizer_config.json", {{"tokenizer_class", "T5Tokenizer"}});
    index["text_encoder"] = {"transformers", "UMT5EncoderModel"};
    index["tokenizer"] = {"transformers", "T5TokenizerFast"};
  }
  write_json(dir / "scheduler" / "scheduler_config.json",
             omni::io::read_json_file(data("wan_pipeline/scheduler/config.json")));
  write_json(dir / "model_index.json", index);
  return dir;
}

}  // namespace tiny_wan
