#include "omni/models/wan/autoencoder_kl_wan.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "omni/error.h"
#include "omni/io/checkpoint.h"
#include "omni/io/json_config.h"
#include "omni/io/safetensors.h"
#include "support/tensor_checks.h"

namespace fs = std::filesystem;
using namespace omni::models::wan;

using omni::testing::max_abs_diff;

namespace {

const fs::path kVaeDir = fs::path(OMNI_TEST_DATA) / "wan/wan_vae";
const fs::path kPipelineDir = fs::path(OMNI_TEST_DATA) / "wan/wan_pipeline";

fs::path vae_temp_dir() {
  auto dir = fs::temp_directory_path() / ("omni_vae_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir;
}

AutoencoderKLWan load_vae(const fs::path& dir, torch::ScalarType dtype) {
  AutoencoderKLWan vae(AutoencoderKLWanConfig::from_file(dir / "config.json"));
  omni::io::load_state_dict(*vae, omni::io::Checkpoint::open_file(dir / "weights.safetensors"));
  vae->to(dtype);
  return vae;
}

torch::Tensor fixture(const fs::path& file, const std::string& key) {
  return omni::io::SafetensorsFile::open(file)->view(key).clone();
}

std::string dtype_name(torch::ScalarType t) {
  return c10::toString(t);
}

nlohmann::json fixture_config() {
  return omni::io::read_json_file(kVaeDir / "config.json");
}

std::string vae_config_error(const nlohmann::json& json) {
  try {
    AutoencoderKLWanConfig::from_json(json, "vae/config.json");
  } catch (const omni::ConfigError& e) {
    return e.what();
  }
  return "no error";
}

std::string vae_load_error(const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                           const std::string& name) {
  const auto path = vae_temp_dir() / name;
  omni::io::save_safetensors(path, tensors);
  AutoencoderKLWan vae(AutoencoderKLWanConfig::from_file(kVaeDir / "config.json"));
  try {
    omni::io::load_state_dict(*vae, omni::io::Checkpoint::open_file(path));
  } catch (const omni::FormatError& e) {
    return e.what();
  }
  return "no error";
}

std::int64_t numel_of(const torch::nn::Module& module) {
  std::int64_t n = 0;
  for (const auto& p : module.parameters()) n += p.numel();
  return n;
}

#define EXPECT_CONTAINS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

}  // namespace

TEST(AutoencoderKLWanConfig, ParsesFixtureConfig) {
  const auto c = AutoencoderKLWanConfig::from_file(kVaeDir / "config.json");
  EXPECT_EQ(c.base_dim, 8);
  EXPECT_EQ(c.decoder_dim(), 8);
  EXPECT_EQ(c.z_dim, 4);
  EXPECT_EQ(c.dim_mult, (std::vector<std::int64_t>{1, 2, 2, 2}));
  EXPECT_EQ(c.num_res_blocks, 1);
  EXPECT_EQ(c.temperal_downsample, (std::vector<bool>{false, true, true}));
  EXPECT_EQ(c.temperal_upsample(), (std::vector<bool>{true, true, false}));
  EXPECT_EQ(c.latents_mean, (std::vector<double>{-0.7571, -0.7089, -0.9113, 0.1075}));
  EXPECT_EQ(c.latents_std, (std::vector<double>{2.8184, 1.4541, 2.3275, 2.6558}));
  EXPECT_FALSE(c.patch_size.has_value());
  EXPECT_EQ(c.scale_factor_spatial, 8);
  EXPECT_EQ(c.scale_factor_temporal, 4);
  EXPECT_EQ(c.spatial_compression(), 8);
  EXPECT_EQ(c.temporal_compression(), 4);
}

TEST(AutoencoderKLWanConfig, UnknownFieldIsNamed) {
  auto json = fixture_config();
  json["temporal_downsample"] = json["temperal_downsample"];  // the "fixed" spelling is not a field
  const auto msg = vae_config_error(json);
  EXPECT_CONTAINS(msg, "unknown field 'temporal_downsample'");
  EXPECT_CONTAINS(msg, "vae/config.json");
}

TEST(AutoencoderKLWanConfig, MissingOrMistypedFieldIsNamed) {
  auto missing = fixture_config();
  missing.erase("z_dim");
  EXPECT_CONTAINS(vae_config_error(missing), "missing required field 'z_dim'");
  auto mistyped = fixture_config();
  mistyped["base_dim"] = "8";
  EXPECT_CONTAINS(vae_config_error(mistyped), "'base_dim' has the wrong type");
}

TEST(AutoencoderKLWanConfig, OlderConfigWithoutNewerFieldsUsesDefaults) {
  auto json = fixture_config();
  for (const char* key : {"decoder_base_dim", "in_channels", "out_channels", "is_residual",
                          "patch_size", "scale_factor_spatial", "scale_factor_temporal"})
    json.erase(key);
  json["clip_output"] = false;  // written by diffusers' Wan2.2 converter; ignored by diffusers
  const auto c = AutoencoderKLWanConfig::from_json(json, "old");
  EXPECT_EQ(c.in_channels, 3);
  EXPECT_EQ(c.scale_factor_spatial, 8);
  EXPECT_EQ(c.clip_output, false);
}

TEST(AutoencoderKLWanConfig, UnimplementedOrInconsistentValuesAreRejected) {
  auto residual = fixture_config();
  residual["is_residual"] = true;
  auto msg = vae_config_error(residual);
  EXPECT_CONTAINS(msg, "'is_residual'");
  EXPECT_CONTAINS(msg, "not implemented");

  auto patched = fixture_config();
  patched["patch_size"] = 2;
  EXPECT_CONTAINS(vae_config_error(patched), "'patch_size'");

  auto attention = fixture_config();
  attention["attn_scales"] = {1.0};
  EXPECT_CONTAINS(vae_config_error(attention), "'attn_scales'");

  auto flags = fixture_config();
  flags["temperal_downsample"] = {false, true};
  EXPECT_CONTAINS(vae_config_error(flags), "'temperal_downsample'");

  auto scale = fixture_config();
  scale["scale_factor_spatial"] = 16;
  EXPECT_CONTAINS(vae_config_error(scale), "'scale_factor_spatial'");

  auto stats = fixture_config();
  stats["latents_std"] = {1.0, 2.0};
  EXPECT_CONTAINS(vae_config_error(stats), "'latents_std'");
}

TEST(AutoencoderKLWan, ParameterCountMatchesModulesAndCheckpoint) {
  const auto config = AutoencoderKLWanConfig::from_file(kVaeDir / "config.json");
  AutoencoderKLWan vae(config);
  const auto counted = AutoencoderKLWanImpl::parameter_count(config);
  EXPECT_EQ(counted, numel_of(*vae));
  std::int64_t in_file = 0;
  const auto file = omni::io::SafetensorsFile::open(kVaeDir / "weights.safetensors");
  for (const auto& info : file->tensors()) in_file += static_cast<std::int64_t>(info.numel());
  EXPECT_EQ(counted, in_file);
  EXPECT_EQ(file->tensors().size(), 146u);
  EXPECT_EQ(vae->named_parameters().size(), 146u);

  // Other shapes: a decoder of its own width, deeper stages, other channel counts.
  AutoencoderKLWanConfig other;
  other.base_dim = 4;
  other.decoder_base_dim = 6;
  other.z_dim = 3;
  other.dim_mult = {1, 2, 3};
  other.num_res_blocks = 2;
  other.temperal_downsample = {true, false};
  other.in_channels = 4;
  other.out_channels = 2;
  other.latents_mean = {0, 0, 0};
  other.latents_std = {1, 1, 1};
  other.scale_factor_spatial = std::nullopt;
  other.scale_factor_temporal = 2;
  AutoencoderKLWan small(other);
  EXPECT_EQ(AutoencoderKLWanImpl::parameter_count(other), numel_of(*small));
}

TEST(AutoencoderKLWan, Wan21VaeParameterCount) {
  AutoencoderKLWanConfig wan21;  // defaults are the Wan2.1 VAE: 96, z 16, [1, 2, 4, 4], 2 blocks
  const auto count = AutoencoderKLWanImpl::parameter_count(wan21);
  std::printf(
      "Wan2.1 VAE (base_dim 96, z_dim 16, dim_mult [1,2,4,4], 2 res blocks): %lld parameters\n",
      static_cast<long long>(count));
  EXPECT_GT(count, 126'000'000);
  EXPECT_LT(count, 128'000'000);
}

TEST(AutoencoderKLWan, ParameterNamesFollowDiffusers) {
  AutoencoderKLWan vae(AutoencoderKLWanConfig::from_file(kVaeDir / "config.json"));
  const auto params = vae->named_parameters();
  for (const char* name :
       {"encoder.conv_in.weight", "encoder.down_blocks.3.time_conv.weight",
        "encoder.down_blocks.1.resample.1.weight", "encoder.mid_block.attentions.0.to_qkv.weight",
        "quant_conv.weight", "post_quant_conv.bias",
        "decoder.up_blocks.0.upsamplers.0.time_conv.bias",
        "decoder.up_blocks.1.resnets.0.conv_shortcut.weight", "decoder.norm_out.gamma"})
    EXPECT_NE(params.find(name), nullptr) << name;
}

TEST(AutoencoderKLWan, DecodeMatchesFixture) {
  const auto latents = fixture(kVaeDir / "inputs.safetensors", "latents");
  const auto expected = fixture(kVaeDir / "outputs.safetensors", "decoded");
  for (auto dtype : {torch::kFloat, torch::kDouble}) {
    auto vae = load_vae(kVaeDir, dtype);
    const auto decoded = vae->decode(latents);
    EXPECT_EQ(decoded.scalar_type(), dtype);
    ASSERT_EQ(decoded.sizes(), (std::vector<std::int64_t>{1, 3, 5, 32, 32}));
    const double err = max_abs_diff(decoded, expected);
    std::printf("decoded (%s) max abs diff vs float64 key: %.3g\n", dtype_name(dtype).c_str(), err);
    EXPECT_LE(err, dtype == torch::kDouble ? 1e-6 : 2e-4);
  }
}

TEST(AutoencoderKLWan, EncodeMatchesFixture) {
  const auto video = fixture(kVaeDir / "inputs.safetensors", "video");
  const auto mean = fixture(kVaeDir / "outputs.safetensors", "encoded_mean");
  const auto logvar = fixture(kVaeDir / "outputs.safetensors", "encoded_logvar");
  for (auto dtype : {torch::kFloat, torch::kDouble}) {
    auto vae = load_vae(kVaeDir, dtype);
    const auto posterior = vae->encode(video);
    EXPECT_EQ(posterior.mean.scalar_type(), dtype);
    const double err_mean = max_abs_diff(posterior.mean, mean);
    const double err_logvar = max_abs_diff(posterior.logvar, logvar);
    std::printf("encoded (%s) max abs diff vs float64 key: mean %.3g, logvar %.3g\n",
                dtype_name(dtype).c_str(), err_mean, err_logvar);
    const double tolerance = dtype == torch::kDouble ? 1e-6 : 1e-4;
    EXPECT_LE(err_mean, tolerance);
    EXPECT_LE(err_logvar, tolerance);
  }
}

TEST(AutoencoderKLWan, PipelineVaeDecodesDecoderInput) {
  const auto outputs = kPipelineDir / "outputs.safetensors";
  const auto z = fixture(outputs, "decoder_input");
  const auto expected = fixture(outputs, "video");
  auto vae = load_vae(kPipelineDir / "vae", torch::kFloat);
  const auto decoded = vae->decode(z);  // [B, 3, F, H, W]
  ASSERT_EQ(decoded.sizes(), (std::vector<std::int64_t>{2, 3, 5, 32, 48}));
  // The pipeline's post-processing: (B, F, C, H, W), x·0.5 + 0.5 clamped to [0, 1].
  const auto video = (decoded.permute({0, 2, 1, 3, 4}) * 0.5 + 0.5).clamp(0.0, 1.0);
  const double err = max_abs_diff(video, expected);
  std::printf("wan_pipeline video (float32) max abs diff vs float64 key: %.3g\n", err);
  EXPECT_LE(err, 5e-4);
}

TEST(AutoencoderKLWan, Bfloat16WeightsComputeInBfloat16) {
  const auto latents = fixture(kVaeDir / "inputs.safetensors", "latents");
  const auto video = fixture(kVaeDir / "inputs.safetensors", "video");
  auto vae = load_vae(kVaeDir, torch::kBFloat16);
  const auto decoded = vae->decode(latents);
  const auto posterior = vae->encode(video);
  EXPECT_EQ(decoded.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(posterior.mean.scalar_type(), torch::kBFloat16);
  const double err_decoded =
      max_abs_diff(decoded, fixture(kVaeDir / "outputs.safetensors", "decoded"));
  const double err_mean =
      max_abs_diff(posterior.mean, fixture(kVaeDir / "outputs.safetensors", "encoded_mean"));
  std::printf("bf16 max abs diff vs float64 key: decoded %.3g, encoded_mean %.3g\n", err_decoded,
              err_mean);
  // Measured here: rounding the weights to bf16 alone (then computing in float64)
  // moves `decoded` by 0.038 at most; computing in bf16 as well, by 0.073 (mean 0.0067).
  // A wrong formula moves it by O(1).
  EXPECT_LE(err_decoded, 0.15);
  EXPECT_LE(err_mean, 0.02);
}

TEST(AutoencoderKLWan, EntryPointsRunForwardPreHooks) {
  auto vae = load_vae(kVaeDir, torch::kFloat);
  int calls = 0;
  auto handle = vae->register_forward_pre_hook([&](omni::nn::Module&) { ++calls; });
  vae->decode(fixture(kVaeDir / "inputs.safetensors", "latents"));
  EXPECT_EQ(calls, 1);
  vae->encode(fixture(kVaeDir / "inputs.safetensors", "video"));
  EXPECT_EQ(calls, 2);
  // A hook that refuses (e.g. weights not resident) stops the call before any compute.
  auto refuse = vae->register_forward_pre_hook(
      [](omni::nn::Module&) { throw omni::NonResidentWeightAccess("not resident"); });
  EXPECT_THROW(vae->decode(torch::zeros({1, 4, 1, 2, 2})), omni::NonResidentWeightAccess);
}

TEST(AutoencoderKLWan, RejectsBadInputs) {
  auto vae = load_vae(kVaeDir, torch::kFloat);
  EXPECT_THROW(vae->decode(torch::zeros({1, 3, 1, 4, 4})), omni::InvalidRequest);
  EXPECT_THROW(vae->decode(torch::zeros({4, 1, 4, 4})), omni::InvalidRequest);
  try {
    vae->encode(torch::zeros({1, 3, 4, 16, 16}));
    FAIL() << "4 frames accepted";
  } catch (const omni::InvalidRequest& e) {
    EXPECT_CONTAINS(e.what(), "4 frames");
  }
}

TEST(AutoencoderKLWan, CheckpointErrorsNameTheTensor) {
  const auto original = omni::io::load_safetensors(kVaeDir / "weights.safetensors");
  const std::string victim = "decoder.up_blocks.0.upsamplers.0.time_conv.weight";

  auto missing = original;
  std::erase_if(missing, [&](const auto& entry) { return entry.first == victim; });
  auto msg = vae_load_error(missing, "missing.safetensors");
  EXPECT_CONTAINS(msg, "missing tensor '" + victim + "'");

  auto unexpected = original;
  unexpected.emplace_back("decoder.up_blocks.0.upsamplers.0.extra", torch::zeros({2}));
  msg = vae_load_error(unexpected, "unexpected.safetensors");
  EXPECT_CONTAINS(msg, "unexpected tensor 'decoder.up_blocks.0.upsamplers.0.extra'");

  auto reshaped = original;
  for (auto& [name, tensor] : reshaped)
    if (name == victim) tensor = torch::zeros({32, 16, 1, 1, 1});
  msg = vae_load_error(reshaped, "reshaped.safetensors");
  EXPECT_CONTAINS(msg, "shape mismatch for tensor '" + victim + "'");
  EXPECT_CONTAINS(msg, "[32, 16, 1, 1, 1]");
}

// Found by fuzz/config_fuzz.cpp: parameter_count() of a config with huge
// sizes overflowed int64 (undefined behaviour); it is a ConfigError now.
TEST(AutoencoderKLWan, ParameterCountRejectsSizesThatOverflow) {
  auto json = fixture_config();
  json["base_dim"] = 1ll << 62;
  const auto config = AutoencoderKLWanConfig::from_json(json, "vae/config.json");
  try {
    AutoencoderKLWanImpl::parameter_count(config);
    FAIL() << "expected a ConfigError";
  } catch (const omni::ConfigError& e) {
    EXPECT_CONTAINS(e.what(), "AutoencoderKLWan config: the sizes imply about");
  }
}
