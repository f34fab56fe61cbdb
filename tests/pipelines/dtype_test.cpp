// Note [Dtype from the checkpoint]: `--dtype auto` keeps each component's
// stored dtype, per-component overrides, mixed files, and typed errors.
#include <gtest/gtest.h>

#include "omni/engine/inspect.h"
#include "omni/error.h"
#include "omni/io/checkpoint.h"
#include "omni/omni.h"
#include "omni/pipelines/dtype_spec.h"
#include "omni/pipelines/wan_pipeline.h"
#include "pipelines/tiny_wan.h"
#include "support/text.h"

using namespace omni;
using omni::testing::contains;
using pipelines::DtypeSpec;
using pipelines::WanPipeline;
namespace fs = std::filesystem;

namespace {

// Experts stored in bfloat16 (with diffusers' float32 modules), VAE in float32.
const fs::path& bf16_dir() {
  static const fs::path dir = [] {
    return tiny_wan::make_pipeline(tiny_wan::temp_dir("bf16"),
                                   {.text_encoder = false, .stored_dtype = torch::kBFloat16});
  }();
  return dir;
}

std::shared_ptr<WanPipeline> load_wan(const std::string& dtype) {
  auto pipe = pipelines::load_pipeline(bf16_dir().string(), {.dtype = DtypeSpec::parse(dtype)});
  return std::dynamic_pointer_cast<WanPipeline>(pipe);
}

std::string dtype_config_error(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no ConfigError";
  return "";
}

}  // namespace

TEST(DtypeSpec, ParsesDefaultsAndPerComponentItems) {
  EXPECT_TRUE(DtypeSpec::parse("auto").is_auto());
  EXPECT_FALSE(DtypeSpec::parse("auto").for_component("vae").has_value());
  EXPECT_EQ(DtypeSpec::parse("bf16").for_component("transformer"), torch::kBFloat16);
  const auto mixed = DtypeSpec::parse("bfloat16, vae=float32");
  EXPECT_EQ(mixed.for_component("transformer"), torch::kBFloat16);
  EXPECT_EQ(mixed.for_component("vae"), torch::kFloat32);
  EXPECT_FALSE(mixed.for_component("vae_2", /*is_vae=*/true).has_value())
      << "a dtype for every component leaves VAEs stored";
  EXPECT_EQ(DtypeSpec::parse("vae=bf16").for_component("vae", true), torch::kBFloat16);
  const auto named = DtypeSpec::parse("transformer=fp16,vae=auto");
  EXPECT_EQ(named.for_component("transformer"), torch::kFloat16);
  EXPECT_FALSE(named.for_component("vae").has_value());
  EXPECT_FALSE(named.for_component("transformer_2").has_value()) << "unnamed: auto";
  for (const auto* text : {"auto", "float16", "bfloat16,vae=float32", "transformer=auto"})
    EXPECT_EQ(DtypeSpec::parse(DtypeSpec::parse(text).to_string()), DtypeSpec::parse(text)) << text;
}

TEST(DtypeSpec, BadItemsAreConfigErrorsNamingThem) {
  EXPECT_TRUE(contains(dtype_config_error([] { DtypeSpec::parse("int8"); }), "'int8'"));
  EXPECT_TRUE(contains(dtype_config_error([] { DtypeSpec::parse("vae=float64"); }), "'float64'"));
  EXPECT_TRUE(
      contains(dtype_config_error([] { DtypeSpec::parse("bf16,fp32"); }), "more than one dtype"));
  EXPECT_TRUE(contains(dtype_config_error([] { DtypeSpec::parse("vae=bf16,vae=fp32"); }),
                       "'vae' is given twice"));
  EXPECT_TRUE(
      contains(dtype_config_error([] { DtypeSpec::parse("=bf16"); }), "is not a component name"));
  EXPECT_TRUE(
      contains(dtype_config_error([] { DtypeSpec::parse("bf16,,vae=fp32"); }), "empty item"));
  EXPECT_TRUE(contains(dtype_config_error([] { DtypeSpec::parse(""); }), "must not be empty"));
}

TEST(DtypeFromCheckpoint, AutoKeepsEachComponentsStoredDtypeInAMixedFile) {
  const auto expert = io::Checkpoint::open_dir(bf16_dir() / "transformer");
  ASSERT_TRUE(expert.contains("scale_shift_table"));
  ASSERT_EQ(expert.info("scale_shift_table").dtype, io::DType::F32) << "the file is mixed";
  EXPECT_EQ(expert.stored_dtype(), torch::kBFloat16);

  const auto pipe = load_wan("auto");
  EXPECT_EQ(pipe->transformer_dtype(), torch::kBFloat16);
  EXPECT_EQ(pipe->transformer_2_dtype(), torch::kBFloat16);
  EXPECT_EQ(pipe->transformer->proj_out->weight.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(pipe->transformer->scale_shift_table.scalar_type(), torch::kFloat32);
  EXPECT_EQ(pipe->vae_dtype(), torch::kFloat32) << "the VAE file is float32";
  for (const auto& p : pipe->vae->parameters()) ASSERT_EQ(p.scalar_type(), torch::kFloat32);
}

TEST(DtypeFromCheckpoint, PerComponentOverridesApplyToTheirComponentOnly) {
  const auto pipe = load_wan("transformer_2=float32,vae=bfloat16");
  EXPECT_EQ(pipe->transformer_dtype(), torch::kBFloat16) << "unnamed: stored";
  EXPECT_EQ(pipe->transformer_2_dtype(), torch::kFloat32);
  EXPECT_EQ(pipe->transformer_2->proj_out->weight.scalar_type(), torch::kFloat32);
  EXPECT_EQ(pipe->vae_dtype(), torch::kBFloat16);
  // Experts of different dtypes run in one request: each gets its own inputs.
  const auto embeds = torch::randn({1, 8, pipe->transformer->config().text_dim});
  const auto latents = pipe->prepare_latents(1, 32, 32, 1, 3, torch::kCPU);
  pipelines::DenoiseArgs args;
  args.steps = 4;
  args.guidance_scale = 1.0;
  const auto result = pipe->denoise(embeds, {}, latents, args);
  EXPECT_TRUE(torch::isfinite(result.latents).all().item<bool>());
}

TEST(DtypeFromCheckpoint, UnknownComponentIsAConfigErrorListingTheRealOnes) {
  const auto message = dtype_config_error([] { load_wan("text_encoder=bfloat16"); });
  EXPECT_TRUE(contains(message, "'text_encoder'")) << message;
  EXPECT_TRUE(contains(message, "transformer, transformer_2, vae")) << message;
  const auto inspect_message = dtype_config_error(
      [] { inspect_model(bf16_dir().string(), {.dtype = DtypeSpec::parse("unet=float16")}); });
  EXPECT_TRUE(contains(inspect_message, "'unet'")) << inspect_message;
  EXPECT_TRUE(contains(dtype_config_error([] {
                         pipelines::load_pipeline("example:wan-shaped",
                                                  {.dtype = torch::kBFloat16});
                       }),
                       "float32"));
}

class DtypeEngineTest : public tiny_wan::TextPipelineTest {};

TEST_F(DtypeEngineTest, ReportedPeakIsTheStoredSizeWithoutDtype) {
  static const fs::path dir =
      tiny_wan::make_pipeline(tiny_wan::temp_dir("bf16_text"), {.stored_dtype = torch::kBFloat16});
  const auto plan = inspect_model(dir.string());
  const auto plan_f32 = inspect_model(dir.string(), {.dtype = DtypeSpec::parse("float32")});
  const auto* expert = plan.component("transformer");
  ASSERT_NE(expert, nullptr);
  EXPECT_EQ(expert->load_dtype, io::DType::BF16);
  EXPECT_EQ(expert->load_bytes, expert->bytes + expert->computed_bytes)
      << "auto loads what is stored (and the RoPE tables it computes)";
  EXPECT_GT(plan_f32.component("transformer")->load_bytes, expert->bytes);
  EXPECT_LT(plan.planned_peak_with_offload_bytes, plan_f32.planned_peak_with_offload_bytes);

  auto args = tiny_wan::engine_args(dir, /*offload=*/true);
  args.offload.streaming = false;  // whole-component swaps: the peak is the plan's
  Omni engine(args);
  const auto out = engine.generate(tiny_wan::small_request(2, 32, 32, 1));
  // Device buffers hold each tensor at a 256-byte aligned offset: the bf16
  // size inspect plans, plus at most that padding per tensor.
  std::uint64_t tensors = 0;
  for (const auto& c : plan.components) tensors += c.tensors + (c.computed_bytes > 0 ? 2 : 0);
  EXPECT_GE(out.report.peak_resident_bytes, plan.planned_peak_with_offload_bytes);
  EXPECT_LT(out.report.peak_resident_bytes, plan.planned_peak_with_offload_bytes + 256 * tensors)
      << "the report's peak is the bf16 size inspect plans";
  EXPECT_LT(out.report.peak_resident_bytes, plan_f32.planned_peak_with_offload_bytes);
  EXPECT_GE(out.report.planned_peak_without_offload_bytes, plan.planned_peak_without_offload_bytes);
  EXPECT_LT(out.report.planned_peak_without_offload_bytes,
            plan.planned_peak_without_offload_bytes + 256 * tensors);
}
