// WanPipeline::load on broken directories: each mistake is a typed error
// that names the component and the file or tensor at fault.
#include <gtest/gtest.h>

#include "omni/error.h"
#include "omni/omni.h"
#include "omni/pipelines/wan_pipeline.h"
#include "pipelines/tiny_wan.h"
#include "support/text.h"

using namespace omni;
using omni::testing::contains;
using pipelines::WanPipeline;
namespace fs = std::filesystem;

namespace {

// A complete tiny pipeline without text encoder (no tokenizer training
// needed), written once; each test breaks its own copy.
const fs::path& pristine() {
  static const fs::path dir = [] {
    auto d = tiny_wan::temp_dir("pristine");
    return tiny_wan::make_pipeline(d, {.text_encoder = false});
  }();
  return dir;
}

fs::path copy_of_pristine() {
  const auto dir = tiny_wan::temp_dir("copy");
  fs::remove_all(dir);
  fs::copy(pristine(), dir, fs::copy_options::recursive);
  return dir;
}

template <typename Error>
std::string error_of(const fs::path& dir) {
  try {
    pipelines::load_pipeline(dir.string());
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong error type: " << e.what();
    return "";
  }
  ADD_FAILURE() << "loading " << dir << " succeeded";
  return "";
}

void edit_index(const fs::path& dir, const std::function<void(nlohmann::json&)>& edit) {
  auto index = io::read_json_file(dir / "model_index.json");
  edit(index);
  tiny_wan::write_json(dir / "model_index.json", index);
}

void edit_weights(
    const fs::path& file,
    const std::function<void(std::vector<std::pair<std::string, torch::Tensor>>&)>& edit) {
  auto tensors = io::load_safetensors(file);
  edit(tensors);
  io::save_safetensors(file, tensors);
}

}  // namespace

TEST(WanPipelineLoader, PristineCopyLoads) {
  auto pipe = std::dynamic_pointer_cast<WanPipeline>(pipelines::load_pipeline(pristine().string()));
  ASSERT_NE(pipe, nullptr);
  EXPECT_FALSE(pipe->has_text_encoder());
  EXPECT_TRUE(pipe->components().encoder_modules.empty());
}

// A path the file system refuses (here a name over NAME_MAX) is a typed
// error naming it, not an escaping std::filesystem_error.
TEST(WanPipelineLoader, PathTheFileSystemRefusesIsAFormatError) {
  const auto dir = tiny_wan::temp_dir("long") / std::string(300, 'd');
  const auto what = error_of<FormatError>(dir);
  EXPECT_TRUE(contains(what, dir.string()) && contains(what, "too long")) << what;
}

TEST(WanPipelineLoader, MissingComponentFolderNamesIt) {
  const auto dir = copy_of_pristine();
  fs::remove_all(dir / "transformer_2");
  const auto message = error_of<FormatError>(dir);
  EXPECT_TRUE(contains(message, "transformer_2")) << message;
  EXPECT_TRUE(contains(message, "missing")) << message;
}

TEST(WanPipelineLoader, MissingWeightsNameTheComponent) {
  const auto dir = copy_of_pristine();
  fs::remove(dir / "vae" / "diffusion_pytorch_model.safetensors");
  const auto message = error_of<FormatError>(dir);
  EXPECT_TRUE(contains(message, "vae")) << message;
  EXPECT_TRUE(contains(message, "no .safetensors")) << message;
}

TEST(WanPipelineLoader, MissingConfigNamesTheFile) {
  const auto dir = copy_of_pristine();
  fs::remove(dir / "transformer" / "config.json");
  const auto message = error_of<FormatError>(dir);
  EXPECT_TRUE(contains(message, "transformer")) << message;
  EXPECT_TRUE(contains(message, "config.json")) << message;
}

TEST(WanPipelineLoader, TruncatedWeightsFileNamesIt) {
  const auto dir = copy_of_pristine();
  const auto file = dir / "transformer" / "diffusion_pytorch_model.safetensors";
  fs::resize_file(file, fs::file_size(file) / 2);
  const auto message = error_of<FormatError>(dir);
  EXPECT_TRUE(contains(message, file.string())) << message;
  EXPECT_TRUE(contains(message, "component 'transformer'")) << message;
}

TEST(WanPipelineLoader, WrongShapeNamesTheTensorAndBothShapes) {
  const auto dir = copy_of_pristine();
  edit_weights(dir / "transformer_2" / "diffusion_pytorch_model.safetensors", [](auto& tensors) {
    for (auto& [name, t] : tensors)
      if (name == "proj_out.weight") t = torch::zeros({t.size(0) + 1, t.size(1)});
  });
  const auto message = error_of<FormatError>(dir);
  EXPECT_TRUE(contains(message, "'proj_out.weight'")) << message;
  EXPECT_TRUE(contains(message, "transformer_2")) << message;
  EXPECT_TRUE(contains(message, "[17, 24]")) << message;
  EXPECT_TRUE(contains(message, "[16, 24]")) << message;
}

TEST(WanPipelineLoader, MissingTensorNamesIt) {
  const auto dir = copy_of_pristine();
  edit_weights(dir / "vae" / "diffusion_pytorch_model.safetensors", [](auto& tensors) {
    std::erase_if(tensors, [](const auto& e) { return e.first == "decoder.conv_out.bias"; });
  });
  const auto message = error_of<FormatError>(dir);
  EXPECT_TRUE(contains(message, "missing tensor 'decoder.conv_out.bias'")) << message;
}

TEST(WanPipelineLoader, UnexpectedTensorNamesIt) {
  const auto dir = copy_of_pristine();
  edit_weights(dir / "transformer" / "diffusion_pytorch_model.safetensors",
               [](auto& tensors) { tensors.emplace_back("blocks.9.extra", torch::zeros({2})); });
  const auto message = error_of<FormatError>(dir);
  EXPECT_TRUE(contains(message, "'blocks.9.extra'")) << message;
}

TEST(WanPipelineLoader, UnknownPipelineClassListsSupportedOnes) {
  const auto dir = copy_of_pristine();
  edit_index(dir, [](auto& index) { index["_class_name"] = "WanImageToVideoPipeline"; });
  const auto message = error_of<ConfigError>(dir);
  EXPECT_TRUE(contains(message, "WanImageToVideoPipeline")) << message;
  EXPECT_TRUE(contains(message, "supported: WanPipeline")) << message;
}

TEST(WanPipelineLoader, UnsupportedSettingsAreConfigErrors) {
  struct Case {
    const char* what;
    std::function<void(nlohmann::json&)> edit;
    const char* expected;
  };
  const std::vector<Case> cases = {
      {"expand_timesteps", [](auto& i) { i["expand_timesteps"] = true; }, "expand_timesteps"},
      {"unknown field",
       [](auto& i) {
         i["image_encoder"] = {"transformers", "CLIPVisionModel"};
       },
       "'image_encoder'"},
      {"wrong class",
       [](auto& i) {
         i["transformer"] = {"diffusers", "FluxTransformer2DModel"};
       },
       "FluxTransformer2DModel"},
      {"boundary without transformer_2",
       [](auto& i) {
         i["transformer_2"] = {nullptr, nullptr};
       },
       "needs transformer_2"},
      {"transformer_2 without boundary", [](auto& i) { i["boundary_ratio"] = nullptr; },
       "boundary_ratio is null"},
      {"scheduler class disagrees",
       [](auto& i) {
         i["scheduler"] = {"diffusers", "FlowMatchEulerDiscreteScheduler"};
       },
       "UniPCMultistepScheduler"},
      {"text encoder without tokenizer",
       [](auto& i) {
         i["text_encoder"] = {"transformers", "UMT5EncoderModel"};
       },
       "tokenizer"},
      {"malformed entry", [](auto& i) { i["vae"] = "AutoencoderKLWan"; }, "'vae'"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    const auto dir = copy_of_pristine();
    edit_index(dir, c.edit);
    const auto message = error_of<ConfigError>(dir);
    EXPECT_TRUE(contains(message, c.expected)) << message;
  }
}

TEST(WanPipelineLoader, ComponentsThatDoNotFitAreConfigErrors) {
  const auto dir = copy_of_pristine();
  // A VAE with another latent width than the experts' channels.
  auto vae = io::read_json_file(dir / "vae" / "config.json");
  vae["z_dim"] = 8;
  vae["latents_mean"] = std::vector<double>(8, 0.0);
  vae["latents_std"] = std::vector<double>(8, 1.0);
  tiny_wan::write_json(dir / "vae" / "config.json", vae);
  // Found from the configs, before any weight is read.
  const auto message = error_of<ConfigError>(dir);
  EXPECT_TRUE(contains(message, "z_dim (8)")) << message;
  EXPECT_TRUE(contains(message, "in/out_channels (4/4)")) << message;
}

TEST(WanPipelineLoader, MissingTokenizerModelNamesIt) {
  if (!io::Tokenizer::available()) GTEST_SKIP() << "built without OMNI_WITH_TOKENIZER";
  const auto dir = copy_of_pristine();
  edit_index(dir, [](auto& i) {
    i["text_encoder"] = {"transformers", "UMT5EncoderModel"};
    i["tokenizer"] = {"transformers", "T5TokenizerFast"};
  });
  fs::create_directories(dir / "tokenizer");
  fs::create_directories(dir / "text_encoder");
  fs::copy_file(tiny_wan::data("umt5_encoder/config.json"), dir / "text_encoder" / "config.json");
  const auto message = error_of<FormatError>(dir);
  EXPECT_TRUE(contains(message, "tokenizer")) << message;
  EXPECT_TRUE(contains(message, "spiece.model")) << message;
}

TEST(WanPipelineLoader, ReferenceFixtureLoadsAndRunsOnlyFromEmbeddings) {
  const auto dir = tiny_wan::data("wan_pipeline");
  auto pipe = std::dynamic_pointer_cast<WanPipeline>(pipelines::load_pipeline(dir.string()));
  ASSERT_NE(pipe, nullptr);
  EXPECT_FALSE(pipe->has_text_encoder());
  EXPECT_TRUE(pipe->has_transformer_2());
  EXPECT_EQ(pipe->config().boundary_ratio, 0.875);

  EngineArgs args;
  args.model = dir.string();
  args.device = "sim";
  args.offload.quiet = true;
  Omni engine(args);  // all resident: fine without an encoder
  try {
    engine.generate({.prompt = "a cat"});
    ADD_FAILURE() << "a text prompt ran on a pipeline without text encoder";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.what(), "prompt embeddings")) << e.what();
  }
  // Model-level offload needs an encoder group for its mutual exclusion.
  args.enable_cpu_offload = true;
  EXPECT_THROW(Omni{args}, ConfigError);
}
