// LoRAs fused at load through EngineArgs::loras (Note [Fusing a LoRA]) on
// example:wan-shaped with model-level offload on the sim device: scale 0
// gives the base frames bitwise, a LoRA changes the frames but not one byte
// of what offload moves, the report lists it, and bad specs fail typed.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "omni/error.h"
#include "omni/io/safetensors.h"
#include "omni/omni.h"
#include "support/scratch_dir.h"

using namespace omni;
namespace fs = std::filesystem;

namespace lora_engine_test {

EngineArgs offload_args() {
  EngineArgs args;
  args.model = "example:wan-shaped";
  args.enable_cpu_offload = true;
  args.device = "sim";
  args.offload.quiet = true;
  return args;
}

GenerationRequest request() {
  GenerationRequest r;
  r.prompt = "a red circle moving right";
  r.seed = 11;
  r.steps = 6;  // shift 12: the switch to transformer_2 is at step 4
  r.width = 32;
  r.height = 32;
  r.num_frames = 5;
  return r;
}

class LoraEngine : public omni::testing::ScratchDirTest {
 protected:
  LoraEngine() : ScratchDirTest("omni_lora_engine_test") {}
  // A PEFT-named LoRA on two layers of the wan-shaped DiT (dim 128) and a
  // Kohya-named one on a third.
  fs::path write_lora() {
    torch::manual_seed(3);
    const auto path = dir_ / "shaped.safetensors";
    io::save_safetensors(path, {{"transformer.blocks.0.fc1.lora_A.weight", torch::randn({8, 128})},
                                {"transformer.blocks.0.fc1.lora_B.weight", torch::randn({384, 8})},
                                {"lora_unet_blocks_1_fc2.lora_down.weight", torch::randn({8, 384})},
                                {"lora_unet_blocks_1_fc2.lora_up.weight", torch::randn({128, 8})},
                                {"lora_unet_blocks_1_fc2.alpha", torch::tensor(4.0)}});
    return path;
  }
};

}  // namespace lora_engine_test
using namespace lora_engine_test;

TEST_F(LoraEngine, ScaleZeroGivesTheBaseFramesBitwise) {
  Omni base(offload_args());
  const auto expected = base.generate(request()).frames;
  auto args = offload_args();
  args.loras = {{.component = "transformer", .path = write_lora(), .scale = 0.0},
                {.component = "transformer_2", .path = write_lora(), .scale = 0.0}};
  Omni omni(args);
  ASSERT_EQ(omni.loras().size(), 2u);
  EXPECT_EQ(omni.loras()[0].tensors, 2u);
  EXPECT_TRUE(torch::equal(omni.generate(request()).frames, expected));
}

TEST_F(LoraEngine, OffloadMovesTheSameBytesWithAndWithoutALora) {
  Omni base(offload_args());
  const auto without = base.generate(request());
  auto args = offload_args();
  args.loras = {{.component = "transformer", .path = write_lora(), .scale = 0.7}};
  Omni omni(args);
  const auto with = omni.generate(request());
  EXPECT_FALSE(torch::equal(with.frames, without.frames));  // the LoRA did something
  EXPECT_EQ(with.report.h2d_bytes, without.report.h2d_bytes);
  EXPECT_EQ(with.report.d2h_bytes, without.report.d2h_bytes);
  EXPECT_EQ(with.report.pinned_host_bytes, without.report.pinned_host_bytes);
  ASSERT_EQ(with.report.components.size(), without.report.components.size());
  for (std::size_t i = 0; i < with.report.components.size(); ++i) {
    EXPECT_EQ(with.report.components[i].bytes, without.report.components[i].bytes);
    EXPECT_EQ(with.report.components[i].upload_bytes, without.report.components[i].upload_bytes);
  }
  // The report lists the LoRA, in the table and the JSON.
  const auto json = with.report_json();
  ASSERT_EQ(json["loras"].size(), 1u);
  EXPECT_EQ(json["loras"][0]["component"], "transformer");
  EXPECT_EQ(json["loras"][0]["scale"], 0.7);
  EXPECT_EQ(json["loras"][0]["style"], "peft+kohya");
  EXPECT_EQ(json["loras"][0]["tensors"], 2);
  EXPECT_EQ(json["loras"][0]["unused_pairs"], 0);
  EXPECT_NE(with.report.to_table().find("LoRA on transformer"), std::string::npos);
  EXPECT_EQ(omni.offload_report().loras.size(), 1u);
  EXPECT_TRUE(without.report_json()["loras"].empty());
}

TEST_F(LoraEngine, SameFramesWithAndWithoutOffload) {
  auto args = offload_args();
  args.loras = {{.component = "transformer_2", .path = write_lora()}};
  Omni offloaded(args);
  args.enable_cpu_offload = false;
  args.device = "cpu";
  Omni resident(args);
  const auto frames = resident.generate(request()).frames;
  EXPECT_TRUE(torch::equal(offloaded.generate(request()).frames, frames));
  EXPECT_EQ(resident.generate(request()).report_json()["loras"].size(), 1u);
  // Layerwise offload fills its homes the same way.
  args.device = "sim";
  args.enable_layerwise_offload = true;
  Omni layerwise(args);
  EXPECT_TRUE(torch::equal(layerwise.generate(request()).frames, frames));
}

TEST_F(LoraEngine, BadSpecsFailTyped) {
  auto args = offload_args();
  args.loras = {{.component = "unet", .path = write_lora()}};
  try {
    Omni omni(args);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("no component 'unet'"), std::string::npos) << what;
    EXPECT_NE(what.find("transformer_2"), std::string::npos) << what;
  }
  args.loras = {{.component = "transformer", .path = dir_ / "absent.safetensors"}};
  EXPECT_THROW(Omni{args}, FormatError);
  io::save_safetensors(dir_ / "other.safetensors",
                       {{"lora_unet_mid_block_proj.lora_down.weight", torch::ones({2, 2})},
                        {"lora_unet_mid_block_proj.lora_up.weight", torch::ones({2, 2})}});
  args.loras = {{.component = "vae", .path = dir_ / "other.safetensors"}};
  EXPECT_THROW(Omni{args}, FormatError);
  args.loras = {{.component = "transformer", .path = write_lora(), .scale = std::nan("")}};
  EXPECT_THROW(Omni{args}, ConfigError);
}
