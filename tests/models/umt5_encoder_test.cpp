// UMT5EncoderModel against the transformers fixture (tests/data/wan/README.md
// section 3), plus tied embeddings, config, loader and parameter-count checks.
#include "omni/models/wan/umt5_encoder.h"

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

const fs::path kUmt5Fixture = fs::path(OMNI_TEST_DATA) / "wan/umt5_encoder";

UMT5EncoderModel make_umt5() {
  UMT5EncoderModel model(UMT5Config::from_file(kUmt5Fixture / "config.json"));
  model->eval();
  return model;
}

UMT5EncoderModel load_umt5() {
  auto model = make_umt5();
  model->load_weights(Checkpoint::open_file(kUmt5Fixture / "weights.safetensors"));
  return model;
}

struct Inputs {
  torch::Tensor ids;
  torch::Tensor mask;
};

Inputs fixture_inputs() {
  auto in = read_tensors(kUmt5Fixture / "inputs.safetensors");
  // Stored as F32 holding exact integers (README "File conventions").
  return {in["input_ids"].to(torch::kLong), in["attention_mask"].to(torch::kLong)};
}

fs::path umt5_temp_dir() {
  auto dir = fs::temp_directory_path() / ("omni_umt5_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir;
}

fs::path save(const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
              const std::string& file) {
  const auto path = umt5_temp_dir() / file;
  omni::io::save_safetensors(path, tensors);
  return path;
}

std::string umt5_load_error(const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                            const std::string& file) {
  auto model = make_umt5();
  try {
    model->load_weights(Checkpoint::open_file(save(tensors, file)));
  } catch (const omni::FormatError& e) {
    return e.what();
  }
  return "no error";
}

std::string umt5_config_error(const nlohmann::json& json) {
  try {
    UMT5Config::from_json(json, "test/config.json");
  } catch (const omni::ConfigError& e) {
    return e.what();
  }
  return "no error";
}

// text_encoder/config.json of the Wan2.x Diffusers repositories (UMT5-XXL),
// with the fields listed in shared/reference/wan22-a14b-facts.md.
nlohmann::json xxl_config_json() {
  return {{"architectures", {"UMT5EncoderModel"}},
          {"classifier_dropout", 0.0},
          {"d_ff", 10240},
          {"d_kv", 64},
          {"d_model", 4096},
          {"decoder_start_token_id", 0},
          {"dense_act_fn", "gelu_new"},
          {"dropout_rate", 0.1},
          {"eos_token_id", 1},
          {"feed_forward_proj", "gated-gelu"},
          {"initializer_factor", 1.0},
          {"is_encoder_decoder", true},
          {"is_gated_act", true},
          {"layer_norm_epsilon", 1e-6},
          {"model_type", "umt5"},
          {"num_decoder_layers", 24},
          {"num_heads", 64},
          {"num_layers", 24},
          {"output_past", true},
          {"pad_token_id", 0},
          {"relative_attention_max_distance", 128},
          {"relative_attention_num_buckets", 32},
          {"scalable_attention", true},
          {"tie_word_embeddings", false},
          {"tokenizer_class", "T5Tokenizer"},
          {"torch_dtype", "bfloat16"},
          {"transformers_version", "4.51.3"},
          {"use_cache", true},
          {"vocab_size", 256384}};
}

}  // namespace

TEST(UMT5Config, ReadsFixtureAndRealConfigs) {
  const auto c = UMT5Config::from_file(kUmt5Fixture / "config.json");
  EXPECT_EQ(c.d_model, 32);
  EXPECT_EQ(c.inner_dim(), 32);
  EXPECT_EQ(c.relative_attention_num_buckets, 8);
  EXPECT_EQ(c.relative_attention_max_distance, 16);
  EXPECT_TRUE(c.is_gated_act);
  EXPECT_EQ(c.dense_act_fn, UMT5Activation::kGeluTanh);
  const auto xxl = UMT5Config::from_json(xxl_config_json(), "xxl");
  EXPECT_EQ(xxl.vocab_size, 256384);

  auto relu = xxl_config_json();
  relu.erase("dense_act_fn");
  relu.erase("is_gated_act");
  relu["feed_forward_proj"] = "relu";
  const auto r = UMT5Config::from_json(relu, "relu");
  EXPECT_FALSE(r.is_gated_act);
  EXPECT_EQ(r.dense_act_fn, UMT5Activation::kRelu);
}

TEST(UMT5Config, RejectsUnknownMissingAndUnsupportedFields) {
  auto json = omni::io::read_json_file(kUmt5Fixture / "config.json");

  auto unknown = json;
  unknown["rotary_dim"] = 64;
  auto msg = umt5_config_error(unknown);
  EXPECT_NE(msg.find("unknown field 'rotary_dim'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("test/config.json"), std::string::npos) << msg;

  auto missing = json;
  missing.erase("d_kv");
  msg = umt5_config_error(missing);
  EXPECT_NE(msg.find("missing required field 'd_kv'"), std::string::npos) << msg;

  auto t5 = json;
  t5["model_type"] = "t5";
  msg = umt5_config_error(t5);
  EXPECT_NE(msg.find("'model_type'"), std::string::npos) << msg;

  auto act = json;
  act["dense_act_fn"] = "quick_gelu";
  msg = umt5_config_error(act);
  EXPECT_NE(msg.find("'dense_act_fn'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not implemented"), std::string::npos) << msg;

  auto proj = json;
  proj["feed_forward_proj"] = "gated-gelu-extra";
  msg = umt5_config_error(proj);
  EXPECT_NE(msg.find("'feed_forward_proj'"), std::string::npos) << msg;

  auto buckets = json;
  buckets["relative_attention_num_buckets"] = 2;
  msg = umt5_config_error(buckets);
  EXPECT_NE(msg.find("'relative_attention_num_buckets'"), std::string::npos) << msg;
}

TEST(UMT5EncoderModel, ParameterNamesAreTheCheckpointKeys) {
  auto model = make_umt5();
  std::set<std::string> ours;
  for (const auto& [name, t] : omni::io::named_state(*model)) ours.insert(name);
  const auto names = Checkpoint::open_file(kUmt5Fixture / "weights.safetensors").names();
  EXPECT_EQ(ours, std::set<std::string>(names.begin(), names.end()));
  EXPECT_EQ(ours.size(), 23u);
  // One tensor under two names.
  const auto params = model->named_parameters();
  EXPECT_TRUE(params["shared.weight"].is_same(params["encoder.embed_tokens.weight"]));
}

TEST(UMT5EncoderModel, MatchesReferenceInFloat32) {
  torch::NoGradGuard no_grad;
  auto model = load_umt5();
  const auto in = fixture_inputs();
  auto out = read_tensors(kUmt5Fixture / "outputs.safetensors");
  const auto hidden = model(in.ids, in.mask);
  ASSERT_EQ(hidden.scalar_type(), torch::kFloat);
  const double err = max_abs_diff(hidden, out["last_hidden_state"]);
  const double drift = max_abs_diff(hidden, out["last_hidden_state.f32"]);
  std::printf(
      "[umt5_encoder] last_hidden_state: max |f32 - f64 ref| = %.3g (vs reference f32 run: "
      "%.3g)\n",
      err, drift);
  EXPECT_LE(err, 1e-4);
  EXPECT_LE(err, 1e-5);
}

TEST(UMT5EncoderModel, MatchesReferenceInFloat64) {
  torch::NoGradGuard no_grad;
  auto model = load_umt5();
  model->to(torch::kFloat64);
  const auto in = fixture_inputs();
  auto out = read_tensors(kUmt5Fixture / "outputs.safetensors");
  // The float mask as stored works as well as an integer one.
  const auto hidden = model(in.ids, in.mask.to(torch::kFloat64));
  ASSERT_EQ(hidden.scalar_type(), torch::kFloat64);
  const double err = max_abs_diff(hidden, out["last_hidden_state"]);
  std::printf("[umt5_encoder] float64 run: %.3g\n", err);
  EXPECT_LE(err, 2e-6);
}

TEST(UMT5EncoderModel, RunsInBFloat16) {
  torch::NoGradGuard no_grad;
  auto model = load_umt5();
  model->to(torch::kBFloat16);
  const auto in = fixture_inputs();
  auto out = read_tensors(kUmt5Fixture / "outputs.safetensors");
  const auto hidden = model(in.ids, in.mask);
  ASSERT_EQ(hidden.scalar_type(), torch::kBFloat16);
  const double err = max_abs_diff(hidden, out["last_hidden_state"]);
  std::printf("[umt5_encoder] bf16 run: max |bf16 - f64 ref| = %.3g (not a parity bound)\n", err);
  EXPECT_TRUE(torch::isfinite(hidden).all().item<bool>());
  EXPECT_LE(err, 0.15);  // |values| ≤ 2.93; bf16 keeps ~3 significant digits
}

TEST(UMT5EncoderModel, PaddedKeysAreMaskedOut) {
  torch::NoGradGuard no_grad;
  auto model = load_umt5();
  auto in = fixture_inputs();
  const auto reference = model(in.ids, in.mask);
  // Row 1 has 6 real tokens: changing the padded ids must not move the real rows.
  auto ids = in.ids.clone();
  ids[1].narrow(0, 6, 4).fill_(42);
  const auto changed = model(ids, in.mask);
  EXPECT_LE(max_abs_diff(changed[1].narrow(0, 0, 6), reference[1].narrow(0, 0, 6)), 1e-6);
  EXPECT_GT(max_abs_diff(changed[1].narrow(0, 6, 4), reference[1].narrow(0, 6, 4)), 1e-3)
      << "padded query rows are computed normally";
  // Without the mask the padded keys take part, and the real rows move.
  const auto unmasked = model(in.ids, torch::Tensor());
  EXPECT_GT(max_abs_diff(unmasked[1].narrow(0, 0, 6), reference[1].narrow(0, 0, 6)), 1e-3);
  EXPECT_LE(max_abs_diff(unmasked[0], reference[0]), 1e-6) << "row 0 has no padding";
}

TEST(UMT5EncoderModel, LoadsWithEitherOrBothEmbeddingKeys) {
  torch::NoGradGuard no_grad;
  const auto in = fixture_inputs();
  auto out = read_tensors(kUmt5Fixture / "outputs.safetensors");
  const auto original = omni::io::load_safetensors(kUmt5Fixture / "weights.safetensors");
  for (const std::string dropped : {"encoder.embed_tokens.weight", "shared.weight"}) {
    auto tensors = original;
    std::erase_if(tensors, [&](const auto& e) { return e.first == dropped; });
    ASSERT_EQ(tensors.size(), 22u);
    auto model = make_umt5();
    model->load_weights(Checkpoint::open_file(save(tensors, "tied.safetensors")));
    EXPECT_LE(max_abs_diff(model(in.ids, in.mask), out["last_hidden_state"]), 1e-4)
        << "without " << dropped;
  }
}

TEST(UMT5EncoderModel, LoaderNamesMissingUnexpectedAndMisshapedTensors) {
  const auto original = omni::io::load_safetensors(kUmt5Fixture / "weights.safetensors");

  auto missing = original;
  std::erase_if(missing, [](const auto& e) {
    return e.first == "encoder.block.1.layer.0.SelfAttention.relative_attention_bias.weight";
  });
  auto msg = umt5_load_error(missing, "missing.safetensors");
  EXPECT_NE(msg.find("missing tensor 'encoder.block.1.layer.0.SelfAttention.relative_attention_"
                     "bias.weight'"),
            std::string::npos)
      << msg;

  auto no_embedding = original;
  std::erase_if(no_embedding, [](const auto& e) {
    return e.first == "shared.weight" || e.first == "encoder.embed_tokens.weight";
  });
  msg = umt5_load_error(no_embedding, "no_embedding.safetensors");
  EXPECT_NE(msg.find("missing tensor"), std::string::npos) << msg;
  EXPECT_NE(msg.find("embed"), std::string::npos) << msg;

  auto unexpected = original;
  unexpected.emplace_back("decoder.block.0.layer.0.SelfAttention.q.weight", torch::zeros({32, 32}));
  msg = umt5_load_error(unexpected, "unexpected.safetensors");
  EXPECT_NE(msg.find("unexpected tensor 'decoder.block.0.layer.0.SelfAttention.q.weight'"),
            std::string::npos)
      << msg;

  auto misshaped = original;
  for (auto& [name, t] : misshaped)
    if (name == "encoder.block.0.layer.1.DenseReluDense.wo.weight") t = torch::zeros({64, 32});
  msg = umt5_load_error(misshaped, "misshaped.safetensors");
  EXPECT_NE(
      msg.find("shape mismatch for tensor 'encoder.block.0.layer.1.DenseReluDense.wo.weight'"),
      std::string::npos)
      << msg;
}

TEST(UMT5EncoderModel, RejectsBadInputs) {
  torch::NoGradGuard no_grad;
  auto model = load_umt5();
  const auto in = fixture_inputs();
  EXPECT_THROW(model(in.ids.to(torch::kFloat), in.mask), omni::InvalidRequest);
  EXPECT_THROW(model(in.ids.flatten(), in.mask), omni::InvalidRequest);
  EXPECT_THROW(model(in.ids + 100, in.mask), omni::InvalidRequest);
  EXPECT_THROW(model(in.ids, in.mask.narrow(1, 0, 9)), omni::InvalidRequest);
}

TEST(UMT5EncoderModel, RelativePositionBuckets) {
  // Bidirectional, 8 buckets (4 per direction, 2 exact), max distance 16: the
  // values transformers' _relative_position_bucket gives for key − query.
  const auto b = umt5_relative_position_buckets(1, 40, 8, 16, torch::kCPU)[0];
  const std::vector<std::int64_t> expected_positive = {0, 5, 6, 6, 6, 6, 7, 7, 7};  // 0..8
  for (std::int64_t d = 0; d <= 8; ++d)
    EXPECT_EQ(b[d].item<std::int64_t>(), expected_positive[d]) << "distance " << d;
  EXPECT_EQ(b[39].item<std::int64_t>(), 7);
  const auto back = umt5_relative_position_buckets(40, 1, 8, 16, torch::kCPU);
  EXPECT_EQ(back[1][0].item<std::int64_t>(), 1);
  EXPECT_EQ(back[2][0].item<std::int64_t>(), 2);
  EXPECT_EQ(back[39][0].item<std::int64_t>(), 3);
}

TEST(UMT5EncoderModel, ParameterCountArithmetic) {
  const auto xxl = UMT5Config::from_json(xxl_config_json(), "xxl");
  EXPECT_EQ(UMT5EncoderModelImpl::parameter_count(xxl), 5'680'910'336);

  for (const bool gated : {true, false}) {
    UMT5Config tiny;
    tiny.vocab_size = 37;
    tiny.d_model = 12;
    tiny.d_kv = 5;
    tiny.num_heads = 3;
    tiny.d_ff = 20;
    tiny.num_layers = 3;
    tiny.relative_attention_num_buckets = 6;
    tiny.relative_attention_max_distance = 9;
    tiny.is_gated_act = gated;
    UMT5EncoderModel model(tiny);
    EXPECT_EQ(UMT5EncoderModelImpl::parameter_count(tiny), distinct_parameter_numel(*model))
        << "gated=" << gated;
  }

  // The fixture stores the tied embedding twice; count it once.
  const auto ckpt = Checkpoint::open_file(kUmt5Fixture / "weights.safetensors");
  std::int64_t stored = 0;
  for (const auto& name : ckpt.names())
    stored += static_cast<std::int64_t>(ckpt.info(name).numel());
  EXPECT_EQ(
      UMT5EncoderModelImpl::parameter_count(UMT5Config::from_file(kUmt5Fixture / "config.json")),
      stored - 100 * 32);
}

// Found by fuzz/config_fuzz.cpp (as for WanTransformer3DConfig): products of
// sizes that overflow int64 are a ConfigError, not undefined behaviour.
TEST(UMT5Config, SizesWhoseProductsOverflowAreRejected) {
  const auto json = omni::io::read_json_file(kUmt5Fixture / "config.json");
  auto heads = json;
  heads["num_heads"] = 1ll << 40;
  heads["d_kv"] = 1ll << 40;
  const auto msg = umt5_config_error(heads);
  EXPECT_NE(msg.find("'num_heads' (1099511627776) × 'd_kv' (1099511627776) overflow"),
            std::string::npos)
      << msg;

  auto wide = json;
  wide["vocab_size"] = 1ll << 40;
  wide["d_model"] = 1ll << 40;
  const auto c = UMT5Config::from_json(wide, "test/config.json");
  EXPECT_THROW(UMT5EncoderModelImpl::parameter_count(c), omni::ConfigError);
}
