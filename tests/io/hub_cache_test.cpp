// Hub ids resolved from a cache laid out like huggingface_hub's (Note [The
// hub cache layout]): refs, snapshots, symlinks into blobs; missing models
// and revisions are ModelNotFound naming what was searched.
#include "omni/io/hub_cache.h"

#include <gtest/gtest.h>

#include <fstream>

#include "omni/error.h"
#include "support/hub_cache.h"
#include "support/scratch_dir.h"
#include "support/text.h"

namespace fs = std::filesystem;
using omni::io::HubModelId;
using omni::testing::add_to_hub_cache;
using omni::testing::contains;
using omni::testing::ScopedEnv;

// Named, not anonymous: in a unity build this file is included into another,
// and GCC warns of fixtures with internal linkage there (-Wsubobject-linkage).
namespace hub_cache_test {

constexpr const char* kCommitA = "0123456789abcdef0123456789abcdef01234567";
constexpr const char* kCommitB = "fedcba9876543210fedcba9876543210fedcba98";

class HubCache : public omni::testing::ScratchDirTest {
 protected:
  HubCache() : ScratchDirTest("omni_hub_cache_test") {}
  void SetUp() override {
    ScratchDirTest::SetUp();
    cache_ = dir_ / "hub";
    for (const auto& [folder, text] : {std::pair{"v1", "first"}, std::pair{"v2", "second"}}) {
      fs::create_directories(dir_ / folder / "transformer");
      std::ofstream(dir_ / folder / "model_index.json") << text;
      std::ofstream(dir_ / folder / "transformer" / "config.json") << text;
    }
    add_to_hub_cache(cache_, "acme", "tiny", dir_ / "v1", kCommitA, "v1.0");
    add_to_hub_cache(cache_, "acme", "tiny", dir_ / "v2", kCommitB, "main");
  }
  omni::io::HubCacheDir cache() const { return {cache_, "$HF_HUB_CACHE"}; }
  static std::string read(const fs::path& file) {
    std::ifstream in(file);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  template <typename Fn>
  static std::string not_found(Fn&& fn) {
    try {
      fn();
    } catch (const omni::ModelNotFound& e) {
      return e.what();
    }
    ADD_FAILURE() << "no ModelNotFound";
    return "";
  }
  fs::path cache_;
};

}  // namespace hub_cache_test
using namespace hub_cache_test;

TEST(HubModelId, ParsesIdsAndRefusesPaths) {
  const auto id = HubModelId::parse("Wan-AI/Wan2.2-T2V-A14B-Diffusers");
  ASSERT_TRUE(id);
  EXPECT_EQ(id->org, "Wan-AI");
  EXPECT_EQ(id->name, "Wan2.2-T2V-A14B-Diffusers");
  EXPECT_EQ(id->revision, "main");
  const auto pinned = HubModelId::parse("acme/tiny@refs/pr/1");
  ASSERT_TRUE(pinned);
  EXPECT_EQ(pinned->revision, "refs/pr/1");
  for (const auto* path : {"/abs/path", "a/b/c", "./x", "../x/y", "acme/tiny@", "acme/tiny@../x",
                           "acme/", "/tiny", "models--acme--tiny", "acme/ti ny"})
    EXPECT_FALSE(HubModelId::parse(path)) << path;
}

TEST_F(HubCache, RevisionsResolveThroughRefsToSnapshotsAndTheirBlobs) {
  const auto main = omni::io::resolve_hub_snapshot(*HubModelId::parse("acme/tiny"), cache());
  EXPECT_EQ(main.filename(), kCommitB);
  EXPECT_TRUE(fs::is_symlink(main / "model_index.json"));
  EXPECT_EQ(read(main / "model_index.json"), "second") << "read through the symlink";
  EXPECT_EQ(read(main / "transformer" / "config.json"), "second");
  const auto tagged = omni::io::resolve_hub_snapshot(*HubModelId::parse("acme/tiny@v1.0"), cache());
  EXPECT_EQ(read(tagged / "model_index.json"), "first");
  const auto by_commit = omni::io::resolve_hub_snapshot(
      *HubModelId::parse(std::string("acme/tiny@") + kCommitA), cache());
  EXPECT_EQ(by_commit, tagged) << "a commit hash names its snapshot";
}

TEST_F(HubCache, MissingModelNamesTheIdTheFolderAndTheDownload) {
  const auto message =
      not_found([&] { omni::io::resolve_hub_snapshot(*HubModelId::parse("acme/huge"), cache()); });
  EXPECT_TRUE(contains(message, "'acme/huge'")) << message;
  EXPECT_TRUE(contains(message, (cache_ / "models--acme--huge").string())) << message;
  EXPECT_TRUE(contains(message, "$HF_HUB_CACHE")) << message;
  EXPECT_TRUE(contains(message, "huggingface-cli download acme/huge")) << message;
}

TEST_F(HubCache, MissingRevisionListsTheCachedOnes) {
  const auto message = not_found(
      [&] { omni::io::resolve_hub_snapshot(*HubModelId::parse("acme/tiny@v3"), cache()); });
  EXPECT_TRUE(contains(message, "revision 'v3'")) << message;
  EXPECT_TRUE(contains(message, "main")) << message;
  EXPECT_TRUE(contains(message, "v1.0")) << message;
  EXPECT_TRUE(contains(message, "--revision v3")) << message;
  // A ref whose snapshot was deleted is as missing as no ref.
  fs::remove_all(cache_ / "models--acme--tiny" / "snapshots" / kCommitA);
  EXPECT_TRUE(contains(not_found([&] {
                         omni::io::resolve_hub_snapshot(*HubModelId::parse("acme/tiny@v1.0"),
                                                        cache());
                       }),
                       kCommitA));
}

TEST_F(HubCache, TheCacheFolderFollowsTheHubClientsVariables) {
  {
    ScopedEnv hub("HF_HUB_CACHE", cache_.string());
    ScopedEnv home("HF_HOME", (dir_ / "elsewhere").string());
    EXPECT_EQ(omni::io::hub_cache_dir().path, cache_);
    EXPECT_EQ(omni::io::resolve_model_dir("acme/tiny").filename(), kCommitB);
  }
  {
    ScopedEnv hub("HF_HUB_CACHE", std::nullopt);
    ScopedEnv home("HF_HOME", dir_.string());
    EXPECT_EQ(omni::io::hub_cache_dir().path, dir_ / "hub");
    EXPECT_EQ(omni::io::hub_cache_dir().source, "$HF_HOME/hub");
  }
  {
    ScopedEnv hub("HF_HUB_CACHE", std::nullopt);
    ScopedEnv home("HF_HOME", std::nullopt);
    ScopedEnv user("HOME", dir_.string());
    EXPECT_EQ(omni::io::hub_cache_dir().path, dir_ / ".cache" / "huggingface" / "hub");
  }
}

TEST_F(HubCache, ALocalDirectoryWinsOverAnIdThatLooksLikeIt) {
  ScopedEnv hub("HF_HUB_CACHE", cache_.string());
  fs::create_directories(dir_ / "acme" / "tiny");
  const auto cwd = fs::current_path();
  fs::current_path(dir_);
  const auto resolved = omni::io::resolve_model_dir("acme/tiny");
  fs::current_path(cwd);
  EXPECT_EQ(resolved, fs::path("acme/tiny"));
  EXPECT_THROW(omni::io::resolve_model_dir("not a model"), omni::ConfigError);
}
