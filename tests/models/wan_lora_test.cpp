// LoRA files in the three key styles fused into a WanTransformer3DModel
// (Note [Fusing a LoRA]): each style's keys reach the right weights with
// scale · α/r · up·down, the sum is rounded once, scale 0 changes nothing,
// and files that do not fit are FormatErrors naming their keys.
#include "omni/models/wan/wan_lora.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <map>
#include <string>

#include "omni/error.h"
#include "omni/io/checkpoint.h"
#include "omni/io/safetensors.h"
#include "omni/models/wan/wan_transformer.h"
#include "support/scratch_dir.h"

namespace fs = std::filesystem;
using namespace omni;
using namespace omni::models::wan;

namespace {

using Tensors = std::vector<std::pair<std::string, torch::Tensor>>;

const fs::path kTransformer = fs::path(OMNI_TEST_DATA) / "wan/wan_transformer";

WanTransformer3DModel load_transformer() {
  WanTransformer3DModel model(WanTransformer3DConfig::from_file(kTransformer / "config.json"));
  model->load_weights(io::Checkpoint::open_file(kTransformer / "weights.safetensors"));
  for (auto& p : model->parameters()) p.set_requires_grad(false);
  return model;
}

std::map<std::string, torch::Tensor> snapshot(const WanTransformer3DModel& model) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : model->named_parameters()) out[p.key()] = p.value().clone();
  return out;
}

torch::Tensor weight(const WanTransformer3DModel& model, const std::string& name) {
  return model->named_parameters()[name];
}

// A random rank-r pair for `target` (a module path of the model).
struct Pair {
  torch::Tensor down, up;
};
Pair random_pair(const WanTransformer3DModel& model, const std::string& target, int rank,
                 std::uint64_t seed) {
  const auto w = weight(model, target + ".weight");
  torch::manual_seed(seed);
  auto down = torch::randn({rank, w.size(1)}) * 0.2;
  return {down, torch::randn({w.size(0), rank}) * 0.2};
}

// What fusing `pair` at `factor` (scale · α/r) must give, computed as the
// note says: float32 sum, one rounding.
torch::Tensor fused(const torch::Tensor& w, const Pair& pair, double factor) {
  return (w.to(torch::kFloat) + torch::mm(pair.up, pair.down).mul_(factor)).to(w.scalar_type());
}

class WanLora : public omni::testing::ScratchDirTest {
 protected:
  WanLora() : ScratchDirTest("omni_wan_lora_test") {}
  LoraSpec write(const std::string& name, const Tensors& tensors, double scale = 1.0) {
    io::save_safetensors(dir_ / name, tensors);
    return {.component = "transformer", .path = dir_ / name, .scale = scale};
  }
};

std::size_t changed(const std::map<std::string, torch::Tensor>& before,
                    const WanTransformer3DModel& model) {
  std::size_t n = 0;
  for (const auto& p : model->named_parameters()) n += !torch::equal(before.at(p.key()), p.value());
  return n;
}

}  // namespace

TEST(WanLoraNames, OriginalNamesOfDiffusersPaths) {
  EXPECT_EQ(wan_original_name("blocks.3.attn1.to_q"), "blocks.3.self_attn.q");
  EXPECT_EQ(wan_original_name("blocks.0.attn1.to_out.0.weight"), "blocks.0.self_attn.o.weight");
  EXPECT_EQ(wan_original_name("blocks.12.attn2.to_v"), "blocks.12.cross_attn.v");
  EXPECT_EQ(wan_original_name("blocks.1.attn2.add_k_proj"), "blocks.1.cross_attn.k_img");
  EXPECT_EQ(wan_original_name("blocks.1.ffn.net.0.proj"), "blocks.1.ffn.0");
  EXPECT_EQ(wan_original_name("blocks.1.ffn.net.2.bias"), "blocks.1.ffn.2.bias");
  EXPECT_EQ(wan_original_name("blocks.1.norm2.weight"), "blocks.1.norm3.weight");
  EXPECT_EQ(wan_original_name("proj_out"), "head.head");
  EXPECT_EQ(wan_original_name("condition_embedder.time_proj"), "time_projection.1");
  EXPECT_EQ(wan_original_name("condition_embedder.text_embedder.linear_2"), "text_embedding.2");
  EXPECT_EQ(wan_original_name("patch_embedding"), "patch_embedding");
  // Only whole dotted segments are renamed.
  EXPECT_EQ(wan_original_name("proj_outer"), "proj_outer");
}

TEST(WanLoraSpec, ParsesComponentPathAndScale) {
  auto spec = LoraSpec::parse("transformer_2=low.safetensors:0.8");
  EXPECT_EQ(spec.component, "transformer_2");
  EXPECT_EQ(spec.path, "low.safetensors");
  EXPECT_EQ(spec.scale, 0.8);
  spec = LoraSpec::parse("transformer=/a/b:c.safetensors");
  EXPECT_EQ(spec.path, "/a/b:c.safetensors");  // not a number: part of the path
  EXPECT_EQ(spec.scale, 1.0);
  EXPECT_EQ(LoraSpec::parse("transformer=a.safetensors:0").scale, 0.0);
  EXPECT_THROW(LoraSpec::parse("a.safetensors"), ConfigError);
  EXPECT_THROW(LoraSpec::parse("=a.safetensors"), ConfigError);
  EXPECT_THROW(LoraSpec::parse("transformer="), ConfigError);
  EXPECT_THROW(LoraSpec::parse("transformer=a.safetensors:nan"), ConfigError);
  EXPECT_THROW(LoraSpec::parse("transformer=a.safetensors:inf"), ConfigError);
}

TEST_F(WanLora, OriginalWanKeysWithAlpha) {
  auto model = load_transformer();
  const auto before = snapshot(model);
  const auto q = random_pair(model, "blocks.0.attn1.to_q", 4, 1);
  const auto o = random_pair(model, "blocks.1.attn2.to_out.0", 4, 2);
  const auto ffn = random_pair(model, "blocks.1.ffn.net.0.proj", 4, 3);
  const auto head = random_pair(model, "proj_out", 2, 4);
  const auto spec = write("wan.safetensors",
                          {{"diffusion_model.blocks.0.self_attn.q.lora_down.weight", q.down},
                           {"diffusion_model.blocks.0.self_attn.q.lora_up.weight", q.up},
                           {"diffusion_model.blocks.0.self_attn.q.alpha", torch::tensor(2.0)},
                           {"diffusion_model.blocks.1.cross_attn.o.lora_down.weight", o.down},
                           {"diffusion_model.blocks.1.cross_attn.o.lora_up.weight", o.up},
                           {"diffusion_model.blocks.1.cross_attn.o.alpha", torch::tensor({8.0})},
                           {"model.diffusion_model.blocks.1.ffn.0.lora_down.weight", ffn.down},
                           {"model.diffusion_model.blocks.1.ffn.0.lora_up.weight", ffn.up},
                           {"diffusion_model.head.head.lora_down.weight", head.down},
                           {"diffusion_model.head.head.lora_up.weight", head.up}},
                          0.5);
  const auto result = fuse_lora(*model, spec);
  EXPECT_EQ(result.style, "original-wan");
  EXPECT_EQ(result.pairs, 4u);
  EXPECT_EQ(result.unused_pairs, 0u);
  EXPECT_EQ(result.touched.size(), 4u);
  EXPECT_EQ(changed(before, model), 4u);
  EXPECT_TRUE(torch::equal(weight(model, "blocks.0.attn1.to_q.weight"),
                           fused(before.at("blocks.0.attn1.to_q.weight"), q, 0.5 * 2.0 / 4)));
  EXPECT_TRUE(torch::equal(weight(model, "blocks.1.attn2.to_out.0.weight"),
                           fused(before.at("blocks.1.attn2.to_out.0.weight"), o, 0.5 * 8.0 / 4)));
  EXPECT_TRUE(torch::equal(weight(model, "blocks.1.ffn.net.0.proj.weight"),
                           fused(before.at("blocks.1.ffn.net.0.proj.weight"), ffn, 0.5)));
  EXPECT_TRUE(torch::equal(weight(model, "proj_out.weight"),
                           fused(before.at("proj_out.weight"), head, 0.5)));
}

TEST_F(WanLora, PeftKeysHaveScaleOneWithoutAlpha) {
  auto model = load_transformer();
  const auto before = snapshot(model);
  const auto k = random_pair(model, "blocks.0.attn2.to_k", 3, 5);
  const auto ffn = random_pair(model, "blocks.0.ffn.net.2", 3, 6);
  const auto spec =
      write("peft.safetensors", {{"transformer.blocks.0.attn2.to_k.lora_A.weight", k.down},
                                 {"transformer.blocks.0.attn2.to_k.lora_B.weight", k.up},
                                 {"blocks.0.ffn.net.2.lora_A.weight", ffn.down},
                                 {"blocks.0.ffn.net.2.lora_B.weight", ffn.up}});
  const auto result = fuse_lora(*model, spec);
  EXPECT_EQ(result.style, "peft");
  EXPECT_EQ(changed(before, model), 2u);
  EXPECT_TRUE(torch::equal(weight(model, "blocks.0.attn2.to_k.weight"),
                           fused(before.at("blocks.0.attn2.to_k.weight"), k, 1.0)));
  EXPECT_TRUE(torch::equal(weight(model, "blocks.0.ffn.net.2.weight"),
                           fused(before.at("blocks.0.ffn.net.2.weight"), ffn, 1.0)));
}

TEST_F(WanLora, KohyaKeysWithAlpha) {
  auto model = load_transformer();
  const auto before = snapshot(model);
  const auto q = random_pair(model, "blocks.1.attn1.to_q", 4, 7);
  const auto ffn = random_pair(model, "blocks.0.ffn.net.2", 4, 8);
  const auto spec = write("kohya.safetensors",
                          {{"lora_unet_blocks_1_self_attn_q.lora_down.weight", q.down},
                           {"lora_unet_blocks_1_self_attn_q.lora_up.weight", q.up},
                           {"lora_unet_blocks_1_self_attn_q.alpha", torch::tensor(1.0)},
                           {"lora_unet_blocks_0_ffn_2.lora_down.weight", ffn.down},
                           {"lora_unet_blocks_0_ffn_2.lora_up.weight", ffn.up},
                           {"lora_unet_blocks_0_ffn_2.alpha", torch::tensor(16.0)}},
                          2.0);
  const auto result = fuse_lora(*model, spec);
  EXPECT_EQ(result.style, "kohya");
  EXPECT_EQ(changed(before, model), 2u);
  EXPECT_TRUE(torch::equal(weight(model, "blocks.1.attn1.to_q.weight"),
                           fused(before.at("blocks.1.attn1.to_q.weight"), q, 2.0 * 1.0 / 4)));
  EXPECT_TRUE(torch::equal(weight(model, "blocks.0.ffn.net.2.weight"),
                           fused(before.at("blocks.0.ffn.net.2.weight"), ffn, 2.0 * 16.0 / 4)));
}

TEST_F(WanLora, HalfPrecisionWeightsAreSummedInFloat32AndRoundedOnce) {
  auto model = load_transformer();
  model->to(torch::kBFloat16);
  const auto before = snapshot(model);
  const auto a = random_pair(model, "blocks.0.attn1.to_v", 4, 9);
  const auto b = random_pair(model, "blocks.0.attn1.to_v", 4, 10);
  // Two files on one tensor: each rounds once on its own.
  fuse_lora(*model, write("a.safetensors", {{"blocks.0.attn1.to_v.lora_A.weight", a.down},
                                            {"blocks.0.attn1.to_v.lora_B.weight", a.up}}));
  const auto after_a = fused(before.at("blocks.0.attn1.to_v.weight"), a, 1.0);
  EXPECT_EQ(after_a.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(weight(model, "blocks.0.attn1.to_v.weight"), after_a));
  // bf16 pairs are read as they are stored and widened.
  fuse_lora(*model, write("b.safetensors",
                          {{"blocks.0.attn1.to_v.lora_A.weight", b.down.to(torch::kBFloat16)},
                           {"blocks.0.attn1.to_v.lora_B.weight", b.up.to(torch::kBFloat16)}}));
  const Pair b16{b.down.to(torch::kBFloat16).to(torch::kFloat),
                 b.up.to(torch::kBFloat16).to(torch::kFloat)};
  EXPECT_TRUE(torch::equal(weight(model, "blocks.0.attn1.to_v.weight"), fused(after_a, b16, 1.0)));
}

TEST_F(WanLora, ScaleZeroLeavesEveryWeightBitwise) {
  auto model = load_transformer();
  model->to(torch::kBFloat16);
  const auto before = snapshot(model);
  const auto q = random_pair(model, "blocks.0.attn1.to_q", 4, 11);
  const auto spec = write("zero.safetensors",
                          {{"diffusion_model.blocks.0.self_attn.q.lora_down.weight", q.down},
                           {"diffusion_model.blocks.0.self_attn.q.lora_up.weight", q.up}},
                          0.0);
  const auto result = fuse_lora(*model, spec);
  EXPECT_EQ(result.touched.size(), 1u);
  EXPECT_EQ(changed(before, model), 0u);
}

TEST_F(WanLora, FullDiffsAddToWeightAndBias) {
  auto model = load_transformer();
  const auto before = snapshot(model);
  const auto w = before.at("blocks.0.norm2.weight");
  const auto b = before.at("proj_out.bias");
  const auto dw = torch::full_like(w, 0.25);
  const auto db = torch::full_like(b, -0.5);
  const auto result = fuse_lora(*model, write("diff.safetensors",
                                              {{"diffusion_model.blocks.0.norm3.diff", dw},
                                               {"diffusion_model.head.head.diff_b", db}},
                                              2.0));
  EXPECT_EQ(result.pairs, 2u);
  EXPECT_EQ(changed(before, model), 2u);
  EXPECT_TRUE(torch::equal(weight(model, "blocks.0.norm2.weight"), w + 0.5));
  EXPECT_TRUE(torch::equal(weight(model, "proj_out.bias"), b - 1.0));
}

TEST_F(WanLora, PartialMatchIsReportedNotAnError) {
  auto model = load_transformer();
  const auto q = random_pair(model, "blocks.0.attn1.to_q", 4, 12);
  const auto result =
      fuse_lora(*model, write("partial.safetensors",
                              {{"diffusion_model.blocks.0.self_attn.q.lora_down.weight", q.down},
                               {"diffusion_model.blocks.0.self_attn.q.lora_up.weight", q.up},
                               // block 7 does not exist in a 2-block model
                               {"diffusion_model.blocks.7.self_attn.q.lora_down.weight", q.down},
                               {"diffusion_model.blocks.7.self_attn.q.lora_up.weight", q.up},
                               {"lora_te_text_model_encoder.lora_down.weight", q.down}}));
  EXPECT_EQ(result.pairs, 3u);
  EXPECT_EQ(result.unused_pairs, 2u);
  ASSERT_EQ(result.unused_keys.size(), 2u);
  EXPECT_EQ(result.unused_keys[0], "diffusion_model.blocks.7.self_attn.q.lora_down.weight");
  EXPECT_EQ(result.unused_keys[1], "lora_te_text_model_encoder.lora_down.weight");
  EXPECT_EQ(result.touched, std::vector<std::string>{"blocks.0.attn1.to_q.weight"});
}

TEST_F(WanLora, NoMatchingKeyIsAFormatErrorNamingSomeKeys) {
  auto model = load_transformer();
  const auto before = snapshot(model);
  const auto spec =
      write("sdxl.safetensors",
            {{"lora_unet_down_blocks_0_attentions_0_proj_in.lora_down.weight", torch::ones({4, 8})},
             {"lora_unet_down_blocks_0_attentions_0_proj_in.lora_up.weight", torch::ones({8, 4})},
             {"lora_unet_down_blocks_0_attentions_0_proj_in.alpha", torch::tensor(4.0)}});
  try {
    fuse_lora(*model, spec);
    FAIL() << "no error";
  } catch (const FormatError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("sdxl.safetensors"), std::string::npos) << what;
    EXPECT_NE(what.find("no key matches a tensor of transformer"), std::string::npos) << what;
    EXPECT_NE(what.find("lora_unet_down_blocks_0_attentions_0_proj_in.alpha"), std::string::npos)
        << what;
  }
  EXPECT_EQ(changed(before, model), 0u);
}

TEST_F(WanLora, ShapeMismatchNamesKeyAndShapesAndChangesNothing) {
  auto model = load_transformer();
  const auto before = snapshot(model);
  const auto q = random_pair(model, "blocks.0.attn1.to_q", 4, 13);
  const auto spec =
      write("big.safetensors", {{"blocks.0.attn1.to_q.lora_A.weight", q.down},
                                {"blocks.0.attn1.to_q.lora_B.weight", q.up},
                                {"blocks.0.attn1.to_k.lora_A.weight", torch::zeros({4, 5120})},
                                {"blocks.0.attn1.to_k.lora_B.weight", torch::zeros({5120, 4})}});
  try {
    fuse_lora(*model, spec);
    FAIL() << "no error";
  } catch (const FormatError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("blocks.0.attn1.to_k.lora_A.weight' [4, 5120]"), std::string::npos) << what;
    EXPECT_NE(what.find("'blocks.0.attn1.to_k.weight' [24, 24]"), std::string::npos) << what;
  }
  EXPECT_EQ(changed(before, model), 0u);  // planned first: to_q untouched too
}

TEST_F(WanLora, HalfAPairIsAFormatError) {
  auto model = load_transformer();
  const auto q = random_pair(model, "blocks.0.attn1.to_q", 4, 14);
  EXPECT_THROW(
      fuse_lora(*model, write("half.safetensors", {{"blocks.0.attn1.to_q.lora_A.weight", q.down}})),
      FormatError);
  EXPECT_THROW(fuse_lora(*model, write("alpha.safetensors",
                                       {{"blocks.0.attn1.to_q.lora_A.weight", q.down},
                                        {"blocks.0.attn1.to_q.lora_B.weight", q.up},
                                        {"blocks.0.attn1.to_q.alpha", torch::ones({2})}})),
               FormatError);
}

TEST_F(WanLora, MissingOrCorruptFileIsAFormatError) {
  auto model = load_transformer();
  EXPECT_THROW(fuse_lora(*model, {.component = "transformer", .path = dir_ / "absent.safetensors"}),
               FormatError);
  std::ofstream(dir_ / "junk.safetensors") << "not a safetensors file";
  EXPECT_THROW(fuse_lora(*model, {.component = "transformer", .path = dir_ / "junk.safetensors"}),
               FormatError);
}

TEST_F(WanLora, APlanChangesNothingUntilAppliedAndAppliesToACopyAlike) {
  auto model = load_transformer();
  const auto before = snapshot(model);
  const auto q = random_pair(model, "blocks.0.attn1.to_q", 4, 15);
  const auto spec = write("plan.safetensors",
                          {{"diffusion_model.blocks.0.self_attn.q.lora_down.weight", q.down},
                           {"diffusion_model.blocks.0.self_attn.q.lora_up.weight", q.up},
                           {"diffusion_model.blocks.0.self_attn.q.alpha", torch::tensor(2.0)}});
  const auto plan = LoraPlan::make(*model, spec);
  EXPECT_EQ(changed(before, model), 0u);
  EXPECT_TRUE(plan.changes("blocks.0.attn1.to_q.weight"));
  EXPECT_FALSE(plan.changes("blocks.0.attn1.to_k.weight"));
  // A host home is a copy of the weight elsewhere: applied there, it holds
  // what fusing the weight itself gives.
  auto home = before.at("blocks.0.attn1.to_q.weight").clone();
  plan.apply("blocks.0.attn1.to_q.weight", home);
  fuse_lora(*model, spec);
  EXPECT_TRUE(torch::equal(home, weight(model, "blocks.0.attn1.to_q.weight")));
  EXPECT_THROW(plan.apply("blocks.0.attn1.to_k.weight", home), InternalError);
}
