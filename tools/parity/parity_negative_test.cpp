// omni-parity on broken copies of the reference fixtures: it must fail with a
// non-zero exit status and name what is wrong.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "omni/io/json_config.h"
#include "omni/io/safetensors.h"

namespace fs = std::filesystem;

namespace {

const fs::path kData = fs::path(OMNI_TEST_DATA) / "wan";

struct Outcome {
  int status = -1;
  std::string output;  // stdout and stderr
};

Outcome run_parity(const fs::path& dir) {
  const std::string command =
      std::string("'") + OMNI_PARITY_BINARY + "' '" + dir.string() + "' 2>&1";
  Outcome out;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return out;
  std::array<char, 4096> buffer{};
  while (std::fgets(buffer.data(), buffer.size(), pipe)) out.output += buffer.data();
  const int raw = pclose(pipe);
  out.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return out;
}

// A private copy of a fixture folder, removed at the end of the test.
class FixtureCopy {
 public:
  explicit FixtureCopy(const std::string& name) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("omni_parity_" + std::to_string(::getpid()) + "_" + info->name()) / name;
    fs::remove_all(dir_.parent_path());
    fs::create_directories(dir_.parent_path());
    fs::copy(kData / name, dir_, fs::copy_options::recursive);
  }
  ~FixtureCopy() {
    std::error_code ignored;
    fs::remove_all(dir_.parent_path(), ignored);
  }
  FixtureCopy(const FixtureCopy&) = delete;
  FixtureCopy& operator=(const FixtureCopy&) = delete;
  const fs::path& dir() const { return dir_; }

  // Rewrites a safetensors file of the copy through `edit`.
  void edit_tensors(
      const std::string& file,
      const std::function<void(std::vector<std::pair<std::string, torch::Tensor>>&)>& edit) {
    auto tensors = omni::io::load_safetensors(dir_ / file);
    edit(tensors);
    omni::io::save_safetensors(dir_ / file, tensors);
  }

 private:
  fs::path dir_;
};

}  // namespace

TEST(OmniParity, ReferenceFixturePasses) {
  const auto r = run_parity(kData / "wan_transformer");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("sample_timestep_per_token"), std::string::npos) << r.output;
}

TEST(OmniParity, RenamedWeightKeyFailsNamingIt) {
  FixtureCopy copy("wan_transformer");
  copy.edit_tensors("weights.safetensors", [](auto& tensors) {
    for (auto& [name, t] : tensors)
      if (name == "blocks.1.ffn.net.0.proj.weight") name = "blocks.1.ffn.net.0.proj.weight_renamed";
  });
  const auto r = run_parity(copy.dir());
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("'blocks.1.ffn.net.0.proj.weight'"), std::string::npos) << r.output;
}

TEST(OmniParity, ExtraWeightKeyFailsNamingIt) {
  FixtureCopy copy("umt5_encoder");
  copy.edit_tensors("weights.safetensors", [](auto& tensors) {
    tensors.emplace_back("encoder.extra", torch::zeros({3}));
  });
  const auto r = run_parity(copy.dir());
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("'encoder.extra'"), std::string::npos) << r.output;
}

TEST(OmniParity, MisShapedWeightFailsNamingIt) {
  FixtureCopy copy("wan_vae");
  copy.edit_tensors("weights.safetensors", [](auto& tensors) {
    for (auto& [name, t] : tensors)
      if (name == "decoder.conv_out.weight") t = torch::cat({t, t}, 0);
  });
  const auto r = run_parity(copy.dir());
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("'decoder.conv_out.weight'"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("shape"), std::string::npos) << r.output;
}

TEST(OmniParity, RenamedKeyInAPipelineComponentFailsNamingIt) {
  FixtureCopy copy("wan_pipeline");
  copy.edit_tensors("transformer_2/weights.safetensors", [](auto& tensors) {
    for (auto& [name, t] : tensors)
      if (name == "proj_out.bias") name = "proj_out.bias_renamed";
  });
  const auto r = run_parity(copy.dir());
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("transformer_2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("'proj_out.bias'"), std::string::npos) << r.output;
}

TEST(OmniParity, PerturbedWeightIsOutOfTolerance) {
  FixtureCopy copy("wan_transformer");
  copy.edit_tensors("weights.safetensors", [](auto& tensors) {
    for (auto& [name, t] : tensors)
      if (name == "proj_out.bias") t = t + 1e-3;
  });
  const auto r = run_parity(copy.dir());
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("FAIL"), std::string::npos) << r.output;
}

TEST(OmniParity, UnknownKindIsRejectedListingTheKnownOnes) {
  FixtureCopy copy("wan_transformer");
  auto config = omni::io::read_json_file(copy.dir() / "config.json");
  config["_class_name"] = "NotAModel";
  std::ofstream(copy.dir() / "config.json") << config.dump(2);
  const auto r = run_parity(copy.dir());
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("NotAModel"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("WanTransformer3DModel"), std::string::npos) << r.output;
}

TEST(OmniParity, MissingDirectoryIsAnError) {
  const auto r = run_parity(kData / "no_such_fixture");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("no_such_fixture"), std::string::npos) << r.output;
}
