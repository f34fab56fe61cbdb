// A WanPipeline loaded by hub id from a cache laid out like the hub client's
// (Note [The hub cache layout]): the same weights as its directory.
#include <gtest/gtest.h>

#include "omni/engine/inspect.h"
#include "omni/error.h"
#include "omni/pipelines/wan_pipeline.h"
#include "pipelines/tiny_wan.h"
#include "support/hub_cache.h"
#include "support/text.h"

namespace fs = std::filesystem;

TEST(HubModel, LoadsAndInspectsThroughTheCachesSymlinks) {
  const auto source =
      tiny_wan::make_pipeline(tiny_wan::temp_dir("hub_source"), {.text_encoder = false});
  const auto cache = tiny_wan::temp_dir("hub");
  omni::testing::add_to_hub_cache(cache, "acme", "tiny-wan", source,
                                  "aaaabbbbccccddddeeeeffff0000111122223333");
  omni::testing::ScopedEnv env("HF_HUB_CACHE", cache.string());

  auto from_hub = std::dynamic_pointer_cast<omni::pipelines::WanPipeline>(
      omni::pipelines::load_pipeline("acme/tiny-wan@main"));
  auto from_dir = std::dynamic_pointer_cast<omni::pipelines::WanPipeline>(
      omni::pipelines::load_pipeline(source.string()));
  ASSERT_TRUE(from_hub && from_dir);
  EXPECT_TRUE(torch::equal(from_hub->transformer_2->proj_out->weight,
                           from_dir->transformer_2->proj_out->weight));

  const auto plan = omni::inspect_model("acme/tiny-wan");
  EXPECT_EQ(plan.model, "acme/tiny-wan");
  EXPECT_EQ(plan.bytes, omni::inspect_model(source.string()).bytes);

  try {
    omni::pipelines::load_pipeline("acme/tiny-wan@v9");
    ADD_FAILURE() << "loaded a revision that is not cached";
  } catch (const omni::ModelNotFound& e) {
    EXPECT_TRUE(omni::testing::contains(e.what(), "revision 'v9'")) << e.what();
  }
}
