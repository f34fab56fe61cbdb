// OmniUnifiedTransformer: strict config reading, checkpoint keys and their
// errors, the reasoner's causal mask and its independence from padding.
#include "omni/models/unified/omni_unified_transformer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "models/tiny_unified_config.h"
#include "omni/error.h"
#include "omni/io/checkpoint.h"
#include "omni/io/safetensors.h"
#include "support/text.h"

namespace fs = std::filesystem;
using namespace omni::models::unified;
using omni::ConfigError;
using omni::FormatError;
using omni::InvalidRequest;
using omni::io::Checkpoint;
using omni::testing::contains;

// Named, not anonymous: in a unity build this file is included into another,
// and GCC warns of fixtures with internal linkage there (-Wsubobject-linkage).
namespace omni_unified_transformer_test {

class OmniUnifiedTransformerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("omni_unified_transformer_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }

  // The config error `json` gives when read from a file; "" when it loads.
  std::string config_error(const nlohmann::json& json) {
    const auto path = dir_ / "config.json";
    std::ofstream(path) << json.dump(2);
    try {
      OmniUnifiedTransformerConfig::from_file(path);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  }

  // The FormatError that loading `tensors` into a fresh model gives; "" when it loads.
  std::string load_error(const std::vector<std::pair<std::string, torch::Tensor>>& tensors) {
    const auto path = dir_ / "weights.safetensors";
    omni::io::save_safetensors(path, tensors);
    OmniUnifiedTransformer model(config());
    try {
      model->load_weights(Checkpoint::open_file(path));
    } catch (const FormatError& e) {
      return e.what();
    }
    return "";
  }

  static OmniUnifiedTransformerConfig config() {
    return OmniUnifiedTransformerConfig::from_json(tiny_unified::transformer_config(), "tiny");
  }

  fs::path dir_;
};

std::vector<std::pair<std::string, torch::Tensor>> state_of(const OmniUnifiedTransformer& model) {
  return omni::io::named_state(*model, OmniUnifiedTransformerImpl::non_persistent_buffers());
}

OmniReasoner seeded_reasoner(std::uint64_t seed = 3) {
  torch::manual_seed(seed);
  OmniReasoner reasoner(
      OmniUnifiedTransformerConfig::from_json(tiny_unified::transformer_config(), "tiny"));
  reasoner->eval();
  return reasoner;
}

torch::Tensor ids(std::vector<std::int64_t> values) {
  return torch::tensor(values, torch::kInt64).unsqueeze(0);
}

}  // namespace omni_unified_transformer_test
using namespace omni_unified_transformer_test;

TEST_F(OmniUnifiedTransformerTest, ConfigReadsEveryField) {
  const auto c = config();
  EXPECT_EQ(c.vocab_size, 64);
  EXPECT_EQ(c.max_tokens, 16);
  EXPECT_EQ(c.reasoner_dim, 16);
  EXPECT_EQ(c.reasoner_layers, 2);
  EXPECT_EQ(c.reasoner_heads, 2);
  EXPECT_EQ(c.reasoner_ffn, 32);
  EXPECT_EQ(c.reasoner_head_dim(), 8);
  EXPECT_EQ(c.generator.text_dim, 16);
  EXPECT_EQ(c.generator.num_layers, 1);
  EXPECT_EQ(config_error(tiny_unified::transformer_config()), "");
}

TEST_F(OmniUnifiedTransformerTest, ConfigErrorsNameTheFileAndTheField) {
  struct Case {
    const char* what;
    std::function<void(nlohmann::json&)> edit;
    std::vector<std::string> mentions;
  };
  const std::vector<Case> cases = {
      {"unknown field", [](auto& j) { j["reasoner_depth"] = 2; }, {"reasoner_depth"}},
      {"missing field", [](auto& j) { j.erase("max_tokens"); }, {"max_tokens"}},
      {"not an integer", [](auto& j) { j["reasoner_dim"] = 16.5; }, {"reasoner_dim"}},
      {"negative", [](auto& j) { j["vocab_size"] = -1; }, {"vocab_size"}},
      {"no layers", [](auto& j) { j["reasoner_layers"] = 0; }, {"reasoner_layers"}},
      {"heads do not divide", [](auto& j) { j["reasoner_heads"] = 3; }, {"reasoner_heads"}},
      {"huge", [](auto& j) { j["vocab_size"] = std::int64_t{1} << 50; }, {"vocab_size"}},
      {"wrong class", [](auto& j) { j["_class_name"] = "WanTransformer3DModel"; }, {"_class_name"}},
      {"generator not an object", [](auto& j) { j["generator"] = 3; }, {"generator"}},
      {"missing generator", [](auto& j) { j.erase("generator"); }, {"generator"}},
      {"generator unknown field",
       [](auto& j) { j["generator"]["depth"] = 1; },
       {"generator", "depth"}},
      {"generator bad value",
       [](auto& j) { j["generator"]["attention_head_dim"] = 7; },
       {"generator", "attention_head_dim"}},
      {"text_dim differs",
       [](auto& j) { j["generator"]["text_dim"] = 32; },
       {"generator", "text_dim", "reasoner_dim"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    auto json = tiny_unified::transformer_config();
    c.edit(json);
    const auto message = config_error(json);
    ASSERT_FALSE(message.empty()) << "accepted";
    EXPECT_TRUE(contains(message, (dir_ / "config.json").string())) << message;
    for (const auto& m : c.mentions) EXPECT_TRUE(contains(message, "'" + m + "'")) << message;
  }
}

TEST_F(OmniUnifiedTransformerTest, CheckpointKeysArePrefixedAndTheGeneratorsAreWans) {
  torch::manual_seed(1);
  OmniUnifiedTransformer model(config());
  omni::models::wan::WanTransformer3DModel wan(config().generator);
  std::set<std::string> expected_generator;
  for (const auto& [name, t] : omni::io::named_state(
           *wan, omni::models::wan::WanTransformer3DModelImpl::non_persistent_buffers()))
    expected_generator.insert("generator." + name);
  std::set<std::string> generator_keys, reasoner_keys;
  for (const auto& [name, t] : state_of(model)) {
    if (name.starts_with("generator."))
      generator_keys.insert(name);
    else if (name.starts_with("reasoner."))
      reasoner_keys.insert(name);
    else
      ADD_FAILURE() << "key without a sub-component prefix: " << name;
  }
  EXPECT_EQ(generator_keys, expected_generator);
  for (const char* key :
       {"reasoner.embed_tokens.weight", "reasoner.embed_positions.weight",
        "reasoner.layers.0.norm1.weight", "reasoner.layers.1.attn.to_q.weight",
        "reasoner.layers.1.attn.to_out.bias", "reasoner.layers.0.ffn.fc_in.weight",
        "reasoner.layers.0.norm2.weight", "reasoner.norm_out.weight"})
    EXPECT_TRUE(reasoner_keys.count(key)) << key;
  EXPECT_EQ(model->reasoner->embed_positions->weight.sizes(), (std::vector<std::int64_t>{16, 16}));

  std::int64_t parameters = 0;
  for (const auto& p : model->parameters()) parameters += p.numel();
  EXPECT_EQ(OmniUnifiedTransformerImpl::parameter_count(config()), parameters);
}

TEST_F(OmniUnifiedTransformerTest, WeightsRoundTripAndBadKeysNameTheTensor) {
  torch::manual_seed(2);
  OmniUnifiedTransformer source(config());
  const auto state = state_of(source);
  EXPECT_EQ(load_error(state), "");
  {
    OmniUnifiedTransformer loaded(config());
    loaded->load_weights(Checkpoint::open_file(dir_ / "weights.safetensors"));
    for (const auto& [name, t] : state_of(loaded)) {
      const auto it =
          std::find_if(state.begin(), state.end(), [&](const auto& e) { return e.first == name; });
      ASSERT_NE(it, state.end()) << name;
      EXPECT_TRUE(torch::equal(t, it->second)) << name;
    }
  }

  auto without = state;
  std::erase_if(without,
                [](const auto& e) { return e.first == "reasoner.layers.1.ffn.fc_out.weight"; });
  EXPECT_TRUE(contains(load_error(without), "reasoner.layers.1.ffn.fc_out.weight"));
  without = state;
  std::erase_if(without, [](const auto& e) { return e.first == "generator.proj_out.bias"; });
  EXPECT_TRUE(contains(load_error(without), "generator.proj_out.bias"));

  auto extra = state;
  extra.emplace_back("reasoner.layers.2.norm1.weight", torch::ones({16}));
  EXPECT_TRUE(contains(load_error(extra), "reasoner.layers.2.norm1.weight"));

  // The Wan transformer's keys without the prefix are not the model's.
  auto unprefixed = state;
  for (auto& [name, t] : unprefixed)
    if (name.starts_with("generator.")) name = name.substr(10);
  EXPECT_TRUE(contains(load_error(unprefixed), "generator."));

  auto misshaped = state;
  for (auto& [name, t] : misshaped)
    if (name == "reasoner.embed_positions.weight") t = torch::zeros({8, 16});
  const auto message = load_error(misshaped);
  EXPECT_TRUE(contains(message, "reasoner.embed_positions.weight")) << message;
  EXPECT_TRUE(contains(message, "16")) << message;
}

TEST_F(OmniUnifiedTransformerTest, ReasonerIsCausal) {
  auto reasoner = seeded_reasoner();
  torch::NoGradGuard no_grad;
  const auto a = reasoner(ids({5, 9, 12, 7, 30, 3, 1}));
  const auto b = reasoner(ids({5, 9, 12, 7, 41, 3, 1}));  // token 4 changed
  ASSERT_EQ(a.sizes(), (std::vector<std::int64_t>{1, 7, 16}));
  EXPECT_TRUE(torch::allclose(a.narrow(1, 0, 4), b.narrow(1, 0, 4), 0.0, 1e-6))
      << "an earlier position saw a later token";
  for (int i = 4; i < 7; ++i)
    EXPECT_GT((a[0][i] - b[0][i]).abs().max().item<double>(), 1e-3)
        << "position " << i << " ignored the change";
}

TEST_F(OmniUnifiedTransformerTest, ReasonerIsIndependentOfPadding) {
  auto reasoner = seeded_reasoner();
  torch::NoGradGuard no_grad;
  const std::vector<std::int64_t> prompt = {5, 9, 12, 7, 1};
  const auto alone = reasoner(ids(prompt));
  const auto padded = [&](std::int64_t length) {
    auto v = prompt;
    v.resize(static_cast<std::size_t>(length), 0);
    auto mask = torch::zeros({1, length}, torch::kInt64);
    mask.narrow(1, 0, 5).fill_(1);
    return std::pair{ids(v), mask};
  };
  for (std::int64_t length : {8, 16}) {
    SCOPED_TRACE(length);
    const auto [input, mask] = padded(length);
    // Padding ids that differ from PAD must not matter either.
    auto noisy = input.clone();
    noisy.narrow(1, 5, length - 5).fill_(33);
    for (const auto& x : {input, noisy}) {
      const auto out = reasoner(x, mask);
      ASSERT_EQ(out.size(1), length);
      EXPECT_TRUE(torch::allclose(out.narrow(1, 0, 5), alone, 0.0, 1e-6));
      EXPECT_EQ(out.narrow(1, 5, length - 5).abs().max().item<double>(), 0.0)
          << "not zero past the prompt";
    }
  }
  // In a batch with a longer prompt: the same rows.
  auto [input, mask] = padded(8);
  const auto other = ids({3, 4, 5, 6, 7, 8, 9, 1});
  const auto batch =
      reasoner(torch::cat({input, other}), torch::cat({mask, torch::ones({1, 8}, torch::kInt64)}));
  EXPECT_TRUE(torch::allclose(batch[0].narrow(0, 0, 5), alone[0], 0.0, 1e-6));
  EXPECT_TRUE(torch::allclose(batch[1], reasoner(other)[0], 0.0, 1e-6));
  // A left-padded row (never made by our tokenizer) stays finite.
  const auto left = reasoner(ids({0, 0, 5, 9, 1}), torch::tensor({{0, 0, 1, 1, 1}}));
  EXPECT_TRUE(torch::isfinite(left).all().item<bool>());
}

TEST_F(OmniUnifiedTransformerTest, ReasonerRejectsBadInputs) {
  auto reasoner = seeded_reasoner();
  torch::NoGradGuard no_grad;
  EXPECT_THROW(reasoner(torch::zeros({1, 17}, torch::kInt64)), InvalidRequest);  // > max_tokens
  EXPECT_THROW(reasoner(ids({5, 64})), InvalidRequest);                          // id ≥ vocab
  EXPECT_THROW(reasoner(ids({5, -1})), InvalidRequest);
  EXPECT_THROW(reasoner(torch::zeros({1, 3})), InvalidRequest);  // float ids
  EXPECT_THROW(reasoner(ids({5, 6}), torch::ones({1, 3})), InvalidRequest);
}

TEST_F(OmniUnifiedTransformerTest, GeneratorTakesTheReasonersHiddenStates) {
  torch::manual_seed(4);
  OmniUnifiedTransformer model(config());
  model->eval();
  torch::NoGradGuard no_grad;
  const auto context = model->reasoner(ids({5, 9, 12, 1}));
  const auto latents = torch::randn({1, 4, 2, 4, 4});
  const auto out = model->generator(latents, torch::tensor({500.0}), context);
  EXPECT_EQ(out.sizes(), latents.sizes());
  EXPECT_TRUE(torch::isfinite(out).all().item<bool>());
  // Another prompt changes the prediction: the generator reads the context.
  const auto other =
      model->generator(latents, torch::tensor({500.0}), model->reasoner(ids({5, 9, 13, 1})));
  EXPECT_GT((out - other).abs().max().item<double>(), 1e-4);
}

TEST_F(OmniUnifiedTransformerTest, HalfPrecisionKeepsTheGeneratorsFloat32Modules) {
  OmniUnifiedTransformer model(config());
  model->to_inference_dtype(torch::kBFloat16);
  EXPECT_EQ(model->reasoner->embed_tokens->weight.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(model->generator->patch_embedding->weight.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(model->generator->scale_shift_table.scalar_type(), torch::kFloat);
  torch::NoGradGuard no_grad;
  const auto out = model->reasoner(ids({5, 9, 1}));
  EXPECT_EQ(out.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::isfinite(out.to(torch::kFloat)).all().item<bool>());
}
