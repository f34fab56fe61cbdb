// WanTransformer3DModel against the diffusers fixtures (tests/data/wan/README.md
// sections 1 and 5), plus config, loader and parameter-count checks.
#include "omni/models/wan/wan_transformer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "omni/error.h"
#include "omni/io/checkpoint.h"
#include "omni/io/json_config.h"
#include "omni/io/safetensors.h"
#include "support/tensor_checks.h"

namespace fs = std::filesystem;
using namespace omni::models::wan;
using omni::io::Checkpoint;

using omni::testing::distinct_parameter_numel;
using omni::testing::max_abs_diff;
using omni::testing::read_tensors;

namespace {

const fs::path kTransformerFixture = fs::path(OMNI_TEST_DATA) / "wan/wan_transformer";
const fs::path kPipeline = fs::path(OMNI_TEST_DATA) / "wan/wan_pipeline";

WanTransformer3DModel load_transformer(const fs::path& dir) {
  WanTransformer3DModel model(WanTransformer3DConfig::from_file(dir / "config.json"));
  model->load_weights(Checkpoint::open_file(dir / "weights.safetensors"));
  model->eval();
  return model;
}

fs::path transformer_temp_dir() {
  auto dir =
      fs::temp_directory_path() / ("omni_wan_transformer_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir;
}

std::string transformer_load_error(
    WanTransformer3DModel model, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
    const std::string& file) {
  const auto path = transformer_temp_dir() / file;
  omni::io::save_safetensors(path, tensors);
  try {
    model->load_weights(Checkpoint::open_file(path));
  } catch (const omni::FormatError& e) {
    return e.what();
  }
  return "no error";
}

std::string transformer_config_error(const nlohmann::json& json) {
  try {
    WanTransformer3DConfig::from_json(json, "test/config.json");
  } catch (const omni::ConfigError& e) {
    return e.what();
  }
  return "no error";
}

// transformer/config.json of Wan2.2-T2V-A14B-Diffusers (shared/reference/wan22-a14b-facts.md).
nlohmann::json a14b_config_json() {
  return {{"_class_name", "WanTransformer3DModel"},
          {"_diffusers_version", "0.35.0.dev0"},
          {"added_kv_proj_dim", nullptr},
          {"attention_head_dim", 128},
          {"cross_attn_norm", true},
          {"eps", 1e-6},
          {"ffn_dim", 13824},
          {"freq_dim", 256},
          {"image_dim", nullptr},
          {"in_channels", 16},
          {"num_attention_heads", 40},
          {"num_layers", 40},
          {"out_channels", 16},
          {"patch_size", {1, 2, 2}},
          {"pos_embed_seq_len", nullptr},
          {"qk_norm", "rms_norm_across_heads"},
          {"rope_max_seq_len", 1024},
          {"text_dim", 4096}};
}

}  // namespace

TEST(WanTransformer3DConfig, ReadsFixtureConfig) {
  const auto c = WanTransformer3DConfig::from_file(kTransformerFixture / "config.json");
  EXPECT_EQ(c.inner_dim(), 24);
  EXPECT_EQ(c.patch_size, (std::array<std::int64_t, 3>{1, 2, 2}));
  EXPECT_EQ(c.rope_split(), (std::array<std::int64_t, 3>{4, 4, 4}));
  EXPECT_EQ(c.ffn_dim, 64);
  EXPECT_TRUE(c.cross_attn_norm);
  const auto a14b = WanTransformer3DConfig::from_json(a14b_config_json(), "a14b");
  EXPECT_EQ(a14b.rope_split(), (std::array<std::int64_t, 3>{44, 42, 42}));
}

TEST(WanTransformer3DConfig, RejectsUnknownMissingAndUnsupportedFields) {
  auto json = omni::io::read_json_file(kTransformerFixture / "config.json");

  auto unknown = json;
  unknown["window_size"] = {-1, -1};
  auto msg = transformer_config_error(unknown);
  EXPECT_NE(msg.find("unknown field 'window_size'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("test/config.json"), std::string::npos) << msg;

  auto missing = json;
  missing.erase("ffn_dim");
  msg = transformer_config_error(missing);
  EXPECT_NE(msg.find("missing required field 'ffn_dim'"), std::string::npos) << msg;

  auto i2v = json;
  i2v["image_dim"] = 1280;
  msg = transformer_config_error(i2v);
  EXPECT_NE(msg.find("'image_dim'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not implemented"), std::string::npos) << msg;

  auto added_kv = json;
  added_kv["added_kv_proj_dim"] = 5120;
  msg = transformer_config_error(added_kv);
  EXPECT_NE(msg.find("'added_kv_proj_dim'"), std::string::npos) << msg;

  auto qk = json;
  qk["qk_norm"] = "rms_norm";
  msg = transformer_config_error(qk);
  EXPECT_NE(msg.find("'qk_norm'"), std::string::npos) << msg;

  auto wrong_type = json;
  wrong_type["num_layers"] = "two";
  msg = transformer_config_error(wrong_type);
  EXPECT_NE(msg.find("'num_layers' has the wrong type"), std::string::npos) << msg;

  auto patch = json;
  patch["patch_size"] = {2, 2};
  msg = transformer_config_error(patch);
  EXPECT_NE(msg.find("'patch_size'"), std::string::npos) << msg;

  auto odd_head = json;
  odd_head["attention_head_dim"] = 13;
  msg = transformer_config_error(odd_head);
  EXPECT_NE(msg.find("'attention_head_dim'"), std::string::npos) << msg;
}

TEST(WanTransformer3DModel, ParameterNamesAreTheCheckpointKeys) {
  WanTransformer3DModel model(
      WanTransformer3DConfig::from_file(kTransformerFixture / "config.json"));
  const auto ckpt = Checkpoint::open_file(kTransformerFixture / "weights.safetensors");
  std::set<std::string> ours;
  for (const auto& [name, t] :
       omni::io::named_state(*model, WanTransformer3DModelImpl::non_persistent_buffers()))
    ours.insert(name);
  const auto names = ckpt.names();
  EXPECT_EQ(ours, std::set<std::string>(names.begin(), names.end()));
  EXPECT_EQ(ours.size(), 69u);
  EXPECT_NO_THROW(model->load_weights(ckpt));
  EXPECT_TRUE(torch::equal(model->blocks->children()[1]->named_parameters()["attn1.to_q.weight"],
                           ckpt.view("blocks.1.attn1.to_q.weight")));
}

TEST(WanTransformer3DModel, MatchesReferenceSampleInFloat32) {
  torch::NoGradGuard no_grad;
  auto model = load_transformer(kTransformerFixture);
  auto in = read_tensors(kTransformerFixture / "inputs.safetensors");
  auto out = read_tensors(kTransformerFixture / "outputs.safetensors");
  const auto sample = model(in["hidden_states"], in["timestep"], in["encoder_hidden_states"]);
  ASSERT_EQ(sample.scalar_type(), torch::kFloat);
  const double err = max_abs_diff(sample, out["sample"]);
  const double drift = max_abs_diff(sample, out["sample.f32"]);
  std::printf("[wan_transformer] sample: max |f32 - f64 ref| = %.3g (vs reference f32 run: %.3g)\n",
              err, drift);
  EXPECT_LE(err, 1e-4);
  EXPECT_LE(err, 1e-5) << "README: a correct float32 port lands below 1e-5";
}

TEST(WanTransformer3DModel, MatchesReferencePerTokenTimestepInFloat32) {
  torch::NoGradGuard no_grad;
  auto model = load_transformer(kTransformerFixture);
  auto in = read_tensors(kTransformerFixture / "inputs.safetensors");
  auto out = read_tensors(kTransformerFixture / "outputs.safetensors");
  ASSERT_EQ(in["timestep_per_token"].sizes(), (std::vector<std::int64_t>{2, 48}));
  const auto sample =
      model(in["hidden_states"], in["timestep_per_token"], in["encoder_hidden_states"]);
  const double err = max_abs_diff(sample, out["sample_timestep_per_token"]);
  std::printf("[wan_transformer] sample_timestep_per_token: max |f32 - f64 ref| = %.3g\n", err);
  EXPECT_LE(err, 1e-4);
  EXPECT_LE(err, 1e-5);
}

TEST(WanTransformer3DModel, MatchesReferenceInFloat64) {
  torch::NoGradGuard no_grad;
  auto model = load_transformer(kTransformerFixture);
  model->to(torch::kFloat64);
  auto in = read_tensors(kTransformerFixture / "inputs.safetensors");
  auto out = read_tensors(kTransformerFixture / "outputs.safetensors");
  const auto x = in["hidden_states"].to(torch::kFloat64);
  const auto text = in["encoder_hidden_states"].to(torch::kFloat64);
  const auto sample = model(x, in["timestep"].to(torch::kFloat64), text);
  ASSERT_EQ(sample.scalar_type(), torch::kFloat64);
  const auto per_token = model(x, in["timestep_per_token"].to(torch::kFloat64), text);
  const double err = max_abs_diff(sample, out["sample"]);
  const double err_tok = max_abs_diff(per_token, out["sample_timestep_per_token"]);
  std::printf("[wan_transformer] float64 run: sample %.3g, per-token %.3g\n", err, err_tok);
  // The float64 keys are exact to ~3e-7 (README "Limits of the float64 reference").
  EXPECT_LE(err, 2e-6);
  EXPECT_LE(err_tok, 2e-6);
}

TEST(WanTransformer3DModel, PerTokenPathWithEqualTimestepsEqualsPerItemPath) {
  torch::NoGradGuard no_grad;
  auto model = load_transformer(kTransformerFixture);
  auto in = read_tensors(kTransformerFixture / "inputs.safetensors");
  const auto per_item = model(in["hidden_states"], in["timestep"], in["encoder_hidden_states"]);
  const auto expanded = in["timestep"].unsqueeze(1).expand({2, 48}).contiguous();
  const auto per_token = model(in["hidden_states"], expanded, in["encoder_hidden_states"]);
  EXPECT_LE(max_abs_diff(per_item, per_token), 1e-6);
}

TEST(WanTransformer3DModel, RunsInBFloat16) {
  torch::NoGradGuard no_grad;
  auto model = load_transformer(kTransformerFixture);
  model->to(torch::kBFloat16);
  auto in = read_tensors(kTransformerFixture / "inputs.safetensors");
  auto out = read_tensors(kTransformerFixture / "outputs.safetensors");
  const auto sample = model(in["hidden_states"], in["timestep"], in["encoder_hidden_states"]);
  ASSERT_EQ(sample.scalar_type(), torch::kBFloat16);
  const double err = max_abs_diff(sample, out["sample"]);
  std::printf("[wan_transformer] bf16 run: max |bf16 - f64 ref| = %.3g (not a parity bound)\n",
              err);
  EXPECT_TRUE(torch::isfinite(sample).all().item<bool>());
  EXPECT_LE(err, 0.1);  // bf16 keeps ~3 significant digits; |values| ≤ 2.1
}

TEST(WanTransformer3DModel, RunsInBFloat16WithDiffusersFloat32Modules) {
  torch::NoGradGuard no_grad;
  WanTransformer3DModel model(
      WanTransformer3DConfig::from_file(kTransformerFixture / "config.json"));
  model->to_inference_dtype(torch::kBFloat16);
  model->load_weights(Checkpoint::open_file(kTransformerFixture / "weights.safetensors"));
  auto params = model->named_parameters();
  EXPECT_EQ(params["blocks.0.attn1.to_q.weight"].scalar_type(), torch::kBFloat16);
  EXPECT_EQ(params["patch_embedding.weight"].scalar_type(), torch::kBFloat16);
  EXPECT_EQ(params["condition_embedder.time_proj.weight"].scalar_type(), torch::kBFloat16);
  EXPECT_EQ(params["condition_embedder.time_embedder.linear_1.weight"].scalar_type(),
            torch::kFloat);
  EXPECT_EQ(params["blocks.1.scale_shift_table"].scalar_type(), torch::kFloat);
  EXPECT_EQ(params["blocks.1.norm2.weight"].scalar_type(), torch::kFloat);
  EXPECT_EQ(params["scale_shift_table"].scalar_type(), torch::kFloat);
  EXPECT_EQ(model->rope->freqs_cos.scalar_type(), torch::kFloat);

  auto in = read_tensors(kTransformerFixture / "inputs.safetensors");
  auto out = read_tensors(kTransformerFixture / "outputs.safetensors");
  for (const std::string key : {"timestep", "timestep_per_token"}) {
    const auto sample = model(in["hidden_states"], in[key], in["encoder_hidden_states"]);
    ASSERT_EQ(sample.scalar_type(), torch::kBFloat16);
    const double err =
        max_abs_diff(sample, out[key == "timestep" ? "sample" : "sample_timestep_per_token"]);
    std::printf("[wan_transformer] bf16 + fp32 modules, %s: max |bf16 - f64 ref| = %.3g\n",
                key.c_str(), err);
    EXPECT_LE(err, 0.1);
  }
}

TEST(WanTransformer3DModel, BlocksRunTheirForwardPreHooks) {
  torch::NoGradGuard no_grad;
  auto model = load_transformer(kTransformerFixture);
  auto in = read_tensors(kTransformerFixture / "inputs.safetensors");
  std::vector<int> calls;
  std::vector<omni::nn::HookHandle> handles;
  for (std::size_t i = 0; i < model->transformer_blocks().size(); ++i)
    handles.push_back(model->transformer_blocks()[i]->register_forward_pre_hook(
        [&calls, i](omni::nn::Module&) { calls.push_back(static_cast<int>(i)); }));
  model(in["hidden_states"], in["timestep"], in["encoder_hidden_states"]);
  EXPECT_EQ(calls, (std::vector<int>{0, 1}));
}

TEST(WanTransformer3DModel, RejectsInputsThatDoNotFit) {
  torch::NoGradGuard no_grad;
  auto model = load_transformer(kTransformerFixture);
  auto in = read_tensors(kTransformerFixture / "inputs.safetensors");
  const auto& x = in["hidden_states"];
  const auto& text = in["encoder_hidden_states"];
  EXPECT_THROW(model(x, torch::ones({2, 47}), text), omni::InvalidRequest);
  EXPECT_THROW(model(x, torch::ones({3}), text), omni::InvalidRequest);
  EXPECT_THROW(model(x.narrow(4, 0, 7), in["timestep"], text), omni::InvalidRequest);
  EXPECT_THROW(model(x, in["timestep"], text.narrow(2, 0, 16)), omni::InvalidRequest);
  EXPECT_THROW(model(torch::zeros({2, 4, 1, 66, 2}), in["timestep"], text), omni::InvalidRequest)
      << "33 patches along the height exceed rope_max_seq_len 32";
}

TEST(WanTransformer3DModel, LoaderNamesMissingUnexpectedAndMisshapedTensors) {
  WanTransformer3DModel model(
      WanTransformer3DConfig::from_file(kTransformerFixture / "config.json"));
  const auto original = omni::io::load_safetensors(kTransformerFixture / "weights.safetensors");

  auto missing = original;
  std::erase_if(missing, [](const auto& e) { return e.first == "blocks.1.ffn.net.2.weight"; });
  auto msg = transformer_load_error(model, missing, "missing.safetensors");
  EXPECT_NE(msg.find("missing tensor 'blocks.1.ffn.net.2.weight'"), std::string::npos) << msg;

  auto unexpected = original;
  unexpected.emplace_back("blocks.0.attn2.add_k_proj.weight", torch::zeros({24, 24}));
  msg = transformer_load_error(model, unexpected, "unexpected.safetensors");
  EXPECT_NE(msg.find("unexpected tensor 'blocks.0.attn2.add_k_proj.weight'"), std::string::npos)
      << msg;

  auto misshaped = original;
  for (auto& [name, t] : misshaped)
    if (name == "condition_embedder.time_proj.weight") t = torch::zeros({144, 25});
  msg = transformer_load_error(model, misshaped, "misshaped.safetensors");
  EXPECT_NE(msg.find("shape mismatch for tensor 'condition_embedder.time_proj.weight'"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("[144, 25]"), std::string::npos) << msg;

  auto rope_in_file = original;
  rope_in_file.emplace_back("rope.freqs_cos", torch::zeros({32, 12}));
  msg = transformer_load_error(model, rope_in_file, "rope.safetensors");
  EXPECT_NE(msg.find("unexpected tensor 'rope.freqs_cos'"), std::string::npos)
      << "the RoPE tables are non-persistent: " << msg;
}

TEST(WanTransformer3DModel, ParameterCountArithmetic) {
  const auto a14b = WanTransformer3DConfig::from_json(a14b_config_json(), "a14b");
  EXPECT_EQ(WanTransformer3DModelImpl::parameter_count(a14b), 14'288'491'584);

  // The arithmetic against real modules, with and without the affine cross-attention norm.
  for (const bool cross_attn_norm : {true, false}) {
    WanTransformer3DConfig tiny;
    tiny.patch_size = {1, 2, 3};
    tiny.num_attention_heads = 3;
    tiny.attention_head_dim = 8;
    tiny.in_channels = 5;
    tiny.out_channels = 7;
    tiny.text_dim = 11;
    tiny.freq_dim = 16;
    tiny.ffn_dim = 40;
    tiny.num_layers = 3;
    tiny.cross_attn_norm = cross_attn_norm;
    tiny.rope_max_seq_len = 16;
    WanTransformer3DModel model(tiny);
    EXPECT_EQ(WanTransformer3DModelImpl::parameter_count(tiny), distinct_parameter_numel(*model))
        << "cross_attn_norm=" << cross_attn_norm;
  }

  // And against the fixture checkpoint.
  const auto ckpt = Checkpoint::open_file(kTransformerFixture / "weights.safetensors");
  std::int64_t stored = 0;
  for (const auto& name : ckpt.names())
    stored += static_cast<std::int64_t>(ckpt.info(name).numel());
  EXPECT_EQ(WanTransformer3DModelImpl::parameter_count(
                WanTransformer3DConfig::from_file(kTransformerFixture / "config.json")),
            stored);
}

// README section 5: each expert, fed step_latents_in[i] and the int64
// step_timestep[i], reproduces step_noise_pred_cond[i] / _uncond[i].
TEST(WanTransformer3DModel, ReproducesPipelineSingleSteps) {
  torch::NoGradGuard no_grad;
  std::vector<WanTransformer3DModel> experts = {load_transformer(kPipeline / "transformer"),
                                                load_transformer(kPipeline / "transformer_2")};
  auto in = read_tensors(kPipeline / "inputs.safetensors");
  auto out = read_tensors(kPipeline / "outputs.safetensors");
  const auto steps = out["timesteps"].size(0);
  ASSERT_EQ(steps, 6);
  double worst_cond = 0, worst_uncond = 0;
  for (std::int64_t i = 0; i < steps; ++i) {
    const auto expert = out["expert_index"][i].item<std::int64_t>();
    ASSERT_TRUE(expert == 0 || expert == 1);
    const auto timestep =
        out["step_timestep"][i].to(torch::kLong);  // int64, as the pipeline passes it
    const auto latents = out["step_latents_in"][i];
    const auto cond = experts[expert](latents, timestep, in["prompt_embeds"]);
    const auto uncond = experts[expert](latents, timestep, in["negative_prompt_embeds"]);
    const double e_cond = max_abs_diff(cond, out["step_noise_pred_cond"][i]);
    const double e_uncond = max_abs_diff(uncond, out["step_noise_pred_uncond"][i]);
    std::printf("[wan_pipeline] step %lld t=%lld expert %lld: cond %.3g uncond %.3g\n",
                static_cast<long long>(i), static_cast<long long>(timestep[0].item<std::int64_t>()),
                static_cast<long long>(expert), e_cond, e_uncond);
    EXPECT_LE(e_cond, 1e-4) << "step " << i;
    EXPECT_LE(e_uncond, 1e-4) << "step " << i;
    worst_cond = std::max(worst_cond, e_cond);
    worst_uncond = std::max(worst_uncond, e_uncond);
  }
  std::printf("[wan_pipeline] worst step: cond %.3g uncond %.3g\n", worst_cond, worst_uncond);
  // The experts must differ, or the check above could not tell them apart.
  const auto t0 = out["step_timestep"][0].to(torch::kLong);
  const auto swapped = experts[1](out["step_latents_in"][0], t0, in["prompt_embeds"]);
  EXPECT_GT(max_abs_diff(swapped, out["step_noise_pred_cond"][0]), 1e-2);
}

// The attention the Wan blocks use: the chunked eager path (LibTorch 1.x, and
// sequences whose score matrix would not fit) equals the one-shot formula.
TEST(WanTransformer3DModel, ChunkedAttentionEqualsOneShotSoftmax) {
  torch::manual_seed(0);
  const auto q = torch::randn({2, 3, 50, 8}, torch::kDouble);
  const auto k = torch::randn({2, 3, 37, 8}, torch::kDouble);
  const auto v = torch::randn({2, 3, 37, 6}, torch::kDouble);
  const auto per_row = torch::randn({2, 1, 50, 37}, torch::kDouble);
  const auto per_key = torch::randn({2, 1, 1, 37}, torch::kDouble);
  const double scale = 1.0 / std::sqrt(8.0);
  for (const auto& mask : {per_row, per_key}) {
    const auto expected =
        torch::matmul(torch::softmax(torch::matmul(q, k.transpose(-2, -1)) * scale + mask, -1), v);
    const auto chunked = omni::nn::eager_attention(q, k, v, mask, scale, 2 * 3 * 37 * 7);  // 7 rows
    const auto one_shot = omni::nn::eager_attention(q, k, v, mask, scale);
    const auto dispatched = omni::nn::scaled_dot_product_attention(q, k, v, mask);
    EXPECT_LE(max_abs_diff(chunked, expected), 1e-12);
    EXPECT_LE(max_abs_diff(one_shot, expected), 1e-12);
    EXPECT_LE(max_abs_diff(dispatched, expected), 1e-10);
  }
}

// Found by fuzz/config_fuzz.cpp: sizes whose products overflow int64 were
// undefined behaviour in inner_dim() and parameter_count(), which omni
// inspect runs on any directory's config.
TEST(WanTransformer3DConfig, SizesWhoseProductsOverflowAreRejected) {
  const auto json = omni::io::read_json_file(kTransformerFixture / "config.json");
  auto heads = json;
  heads["num_attention_heads"] = 1ll << 40;
  heads["attention_head_dim"] = 1ll << 40;
  const auto msg = transformer_config_error(heads);
  EXPECT_NE(msg.find("'num_attention_heads' (1099511627776) × 'attention_head_dim' "
                     "(1099511627776) overflow"),
            std::string::npos)
      << msg;

  auto deep = json;  // every size valid on its own, the count too large
  deep["num_layers"] = 1ll << 40;
  deep["ffn_dim"] = 1ll << 40;
  const auto c = WanTransformer3DConfig::from_json(deep, "test/config.json");
  try {
    WanTransformer3DModelImpl::parameter_count(c);
    FAIL() << "expected a ConfigError";
  } catch (const omni::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("more than omni can count"), std::string::npos)
        << e.what();
  }
}
