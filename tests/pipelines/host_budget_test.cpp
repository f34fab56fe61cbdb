// Note [Weights that alias the file] and Note [Mapped homes] end to end:
// loaded weights are the checkpoint's pages, and a host memory budget
// changes where homes live, never the frames.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include "omni/omni.h"
#include "omni/pipelines/wan_pipeline.h"
#include "pipelines/tiny_wan.h"

namespace fs = std::filesystem;

// Named, not anonymous: in a unity build this file is included into another,
// and GCC warns of fixtures with internal linkage there (-Wsubobject-linkage).
namespace host_budget_test {

// The file whose mapping holds `address` in /proc/self/maps ("" for
// anonymous memory).
std::string mapping_of(const void* address) {
  const auto a = reinterpret_cast<std::uintptr_t>(address);
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    std::istringstream in(line);
    std::string range, perms, offset, dev, inode, path;
    in >> range >> perms >> offset >> dev >> inode >> path;
    const auto dash = range.find('-');
    const auto lo = std::stoull(range.substr(0, dash), nullptr, 16);
    const auto hi = std::stoull(range.substr(dash + 1), nullptr, 16);
    if (a >= lo && a < hi) return path;
  }
  return "";
}

const fs::path& budget_dir() {
  static const fs::path dir =
      tiny_wan::make_pipeline(tiny_wan::temp_dir("budget"), {.stored_dtype = torch::kBFloat16});
  return dir;
}

omni::GenerateResult generate_with(std::optional<std::uint64_t> budget,
                                   std::uint64_t staging = 16 << 10) {
  auto args = tiny_wan::engine_args(budget_dir(), /*offload=*/true);
  args.host_memory_budget_bytes = budget;
  args.pinned_staging_bytes = staging;
  omni::Omni engine(args);
  auto request = tiny_wan::small_request(3, 32, 32, 5, /*seed=*/11);
  request.negative_prompt = "blurry";
  return engine.generate(request);
}

class HostBudgetTest : public tiny_wan::TextPipelineTest {};

}  // namespace host_budget_test
using namespace host_budget_test;

TEST(WeightsThatAliasTheFile, LoadedWeightsAreTheCheckpointsPagesUnlessConverted) {
  const auto dir = tiny_wan::make_pipeline(
      tiny_wan::temp_dir("alias"), {.text_encoder = false, .stored_dtype = torch::kBFloat16});
  const auto stored = omni::pipelines::load_pipeline(dir.string());
  auto& pipe = dynamic_cast<omni::pipelines::WanPipeline&>(*stored);
  const auto file = (dir / "transformer" / "diffusion_pytorch_model.safetensors").string();
  EXPECT_EQ(mapping_of(pipe.transformer->proj_out->weight.data_ptr()), file);
  const auto converted = omni::pipelines::load_pipeline(
      dir.string(), {.dtype = omni::pipelines::DtypeSpec::parse("transformer=float32")});
  auto& f32 = dynamic_cast<omni::pipelines::WanPipeline&>(*converted);
  const auto where = mapping_of(f32.transformer->proj_out->weight.data_ptr());
  EXPECT_TRUE(where.empty() || where == "[heap]")
      << "converted to float32: an anonymous copy, not " << where;
}

TEST_F(HostBudgetTest, FramesAreBitwiseTheSameWithAndWithoutABudget) {
  const auto unbudgeted = generate_with(std::nullopt);
  EXPECT_FALSE(unbudgeted.report.host_plan.has_value());
  EXPECT_EQ(unbudgeted.report.mapped_host_bytes, 0u);

  const auto all_mapped = generate_with(32 << 10);  // only the staging ring fits
  ASSERT_TRUE(all_mapped.report.host_plan.has_value());
  EXPECT_EQ(all_mapped.report.pinned_host_bytes, 0u);
  EXPECT_EQ(all_mapped.report.mapped_host_bytes, all_mapped.report.host_plan->mapped_bytes());
  EXPECT_GT(all_mapped.report.mapped_host_bytes, 0u);
  EXPECT_EQ(all_mapped.report.staging_host_bytes, 16u << 10);
  EXPECT_TRUE(torch::equal(all_mapped.frames, unbudgeted.frames));

  // Room for one expert beside the ring: it is pinned, the rest mapped.
  const auto& plan = *all_mapped.report.host_plan;
  std::uint64_t expert = 0;
  for (const auto& c : plan.components)
    if (c.name == "transformer") expert = c.bytes;
  const auto one_pinned = generate_with((16 << 10) + expert + expert / 2);
  ASSERT_TRUE(one_pinned.report.host_plan.has_value());
  EXPECT_EQ(one_pinned.report.host_plan->kind_of("transformer"), omni::offload::HomeKind::pinned);
  EXPECT_EQ(one_pinned.report.host_plan->kind_of("transformer_2"), omni::offload::HomeKind::mapped);
  EXPECT_GT(one_pinned.report.pinned_host_bytes, 0u);
  EXPECT_TRUE(torch::equal(one_pinned.frames, unbudgeted.frames));

  EXPECT_THROW(generate_with(8 << 10, 16 << 10), omni::ConfigError)
      << "the budget must hold the ring";
}

// OffloadOptions::home_progress (the CLI's loading bar): bytes only grow, the
// total is every component's weights, the last call reaches it; a mapped
// home counts as filled as soon as it points at the file.
TEST_F(HostBudgetTest, HomeProgressCountsEveryHomesBytesUpToTheTotal) {
  for (const std::optional<std::uint64_t> budget :
       {std::optional<std::uint64_t>{}, std::optional<std::uint64_t>{32 << 10}}) {
    auto args = tiny_wan::engine_args(budget_dir(), /*offload=*/true);
    args.host_memory_budget_bytes = budget;
    args.pinned_staging_bytes = 16 << 10;
    std::vector<std::pair<std::uint64_t, std::uint64_t>> calls;
    args.offload.home_progress = [&](std::uint64_t done, std::uint64_t total) {
      calls.emplace_back(done, total);
    };
    omni::Omni engine(args);
    std::uint64_t weights = 0;
    for (const auto& c : engine.offload_report().components) weights += c.bytes;
    ASSERT_GT(calls.size(), 3u);
    for (std::size_t i = 0; i < calls.size(); ++i) {
      EXPECT_EQ(calls[i].second, weights);
      if (i > 0) EXPECT_GT(calls[i].first, calls[i - 1].first);
    }
    EXPECT_EQ(calls.back().first, weights) << (budget ? "budget" : "no budget");
  }
}

// Note [Fusing a LoRA] into mapped homes: a home left in the checkpoint gets
// private pages where the LoRA writes it: the frames are those of pinned
// homes, and the checkpoint file is never written.
TEST_F(HostBudgetTest, ALoraFusedIntoMappedHomesGivesThePinnedHomesFrames) {
  torch::manual_seed(4);
  const auto lora = budget_dir().parent_path() / "budget_lora.safetensors";
  omni::io::save_safetensors(
      lora, {{"diffusion_model.blocks.0.self_attn.q.lora_down.weight", torch::randn({2, 24})},
             {"diffusion_model.blocks.0.self_attn.q.lora_up.weight", torch::randn({24, 2})},
             {"diffusion_model.blocks.1.ffn.2.lora_down.weight", torch::randn({2, 64})},
             {"diffusion_model.blocks.1.ffn.2.lora_up.weight", torch::randn({24, 2})}});
  const auto weights = budget_dir() / "transformer" / "diffusion_pytorch_model.safetensors";
  std::ifstream before_in(weights, std::ios::binary);
  const std::string before{std::istreambuf_iterator<char>(before_in), {}};
  const auto run = [&](std::optional<std::uint64_t> budget) {
    auto args = tiny_wan::engine_args(budget_dir(), /*offload=*/true);
    args.host_memory_budget_bytes = budget;
    args.pinned_staging_bytes = 16 << 10;
    args.loras = {{.component = "transformer", .path = lora, .scale = 0.5}};
    omni::Omni engine(args);
    auto request = tiny_wan::small_request(3, 32, 32, 5, /*seed=*/11);
    request.negative_prompt = "blurry";
    return engine.generate(request);
  };
  const auto pinned = run(std::nullopt);
  const auto mapped = run(32 << 10);  // only the staging ring fits
  ASSERT_TRUE(mapped.report.host_plan.has_value());
  EXPECT_EQ(mapped.report.host_plan->kind_of("transformer"), omni::offload::HomeKind::mapped);
  EXPECT_TRUE(torch::equal(mapped.frames, pinned.frames));
  EXPECT_FALSE(torch::equal(pinned.frames, generate_with(std::nullopt).frames));
  EXPECT_EQ(mapped.report.h2d_bytes, generate_with(32 << 10).report.h2d_bytes);
  std::ifstream after_in(weights, std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(after_in), {}), before);
}
