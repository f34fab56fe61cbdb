// `omni bench soak` end to end on the sim device with a short run: the rows,
// the verdict line and the JSON carry the promised figures. Behaviour, not
// the 200-generation figures (those are the benchmark's job).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "support/run_process.h"
#include "support/scratch_dir.h"

namespace {

class BenchSoak : public omni::testing::ScratchDirTest {
 protected:
  BenchSoak() : ScratchDirTest("omni_bench_soak_test") {}

  omni::testing::ProcessResult soak(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {OMNI_BINARY, "bench", "soak"};
    argv.insert(argv.end(), args.begin(), args.end());
    return omni::testing::run_process(argv);
  }
};

TEST_F(BenchSoak, ShortRunOnSimSamplesAndPasses) {
  const auto path = (dir_ / "soak.json").string();
  const auto r = soak({"--generations", "7", "--warmup", "3", "--interval", "2", "--json", path});
  if (r.err.find("this build has no benchmarks") != std::string::npos)
    GTEST_SKIP() << "built without OMNI_BUILD_BENCH";
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("baseline (after warm-up)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("soak: PASS after 7 generations (3 warm-up) on sim"), std::string::npos)
      << r.out;

  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const auto j = nlohmann::json::parse(text.str());
  EXPECT_EQ(j.at("device"), "sim");
  EXPECT_TRUE(j.at("simulated").get<bool>());
  EXPECT_TRUE(j.at("pass").get<bool>());
  EXPECT_EQ(j.at("mismatched_outputs"), 0) << "generations 5..7 repeat 1..3's seeds";
  // Baseline after generation 3, then 5, 7 (every 2, and the last).
  std::vector<int> generations;
  for (const auto& s : j.at("samples")) generations.push_back(s.at("generation"));
  EXPECT_EQ(generations, (std::vector<int>{3, 5, 7}));
  const auto& baseline = j.at("samples").front();
  EXPECT_GT(baseline.at("rss_bytes").get<std::uint64_t>(), 0u);
  EXPECT_GT(baseline.at("pinned_host_bytes").get<std::uint64_t>(), 0u) << "offload pins the homes";
  EXPECT_GT(baseline.at("device_peak_bytes").get<std::uint64_t>(), 0u);
  EXPECT_EQ(j.at("pinned_host_growth_bytes"), 0);
  EXPECT_EQ(j.at("device_peak_growth_bytes"), 0);
}

TEST_F(BenchSoak, RejectsAWarmUpThatLeavesNothingToMeasure) {
  const auto r = soak({"--generations", "3", "--warmup", "3", "--json", ""});
  if (r.err.find("this build has no benchmarks") != std::string::npos)
    GTEST_SKIP() << "built without OMNI_BUILD_BENCH";
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--warmup"), std::string::npos) << r.err;
}

}  // namespace
