// WanPipeline::resolve: defaults and request validation. Bad values are
// InvalidRequest errors naming the field, never silently rounded.
#include <gtest/gtest.h>

#include <cmath>

#include "omni/error.h"
#include "omni/omni.h"
#include "omni/pipelines/wan_pipeline.h"
#include "pipelines/tiny_wan.h"

using namespace omni;
using pipelines::WanPipeline;
namespace fs = std::filesystem;

// Named, not anonymous: in a unity build this file is included into another,
// and GCC warns of fixtures with internal linkage there (-Wsubobject-linkage).
namespace wan_pipeline_request_test {

class WanRequestTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!io::Tokenizer::available() || !tiny_wan::have_spm_train()) return;
    dir_ = new fs::path(tiny_wan::make_pipeline(tiny_wan::temp_dir("request")));
    EngineArgs args;
    args.model = dir_->string();
    args.device = "sim";
    args.enable_cpu_offload = true;
    args.offload.quiet = true;
    engine_ = new Omni(args);
  }
  static void TearDownTestSuite() {
    delete engine_;
    engine_ = nullptr;
    if (dir_) fs::remove_all(*dir_);
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    if (!engine_) GTEST_SKIP() << "needs OMNI_WITH_TOKENIZER and spm_train";
  }
  static const WanPipeline& pipe() { return dynamic_cast<const WanPipeline&>(engine_->pipeline()); }

  static GenerationRequest valid() {
    GenerationRequest r;
    r.prompt = "a red circle";
    r.steps = 2;
    r.width = 32;
    r.height = 16;
    r.num_frames = 1;
    return r;
  }

  // The message of the InvalidRequest that `r` raises; a failure if none.
  static std::string rejection(const GenerationRequest& r) {
    try {
      engine_->generate(r);
    } catch (const InvalidRequest& e) {
      return e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not an InvalidRequest: " << e.what();
      return "";
    }
    ADD_FAILURE() << "the request was accepted";
    return "";
  }

  static inline fs::path* dir_ = nullptr;
  static inline Omni* engine_ = nullptr;
};

}  // namespace wan_pipeline_request_test
using namespace wan_pipeline_request_test;

TEST_F(WanRequestTest, DefaultsAreTheWan22Recipe) {
  // The default size is the real model's; this tiny one's RoPE table is too
  // short for it, so the size is given and the rest defaults.
  EXPECT_EQ(pipe().defaults().width, 832);
  EXPECT_EQ(pipe().defaults().height, 480);
  EXPECT_EQ(pipe().defaults().num_frames, 81);
  auto sized = valid();
  sized.steps.reset();
  const auto r = pipe().resolve(sized);
  EXPECT_EQ(*r.steps, 40);
  EXPECT_EQ(*r.guidance_scale, 4.0);
  EXPECT_EQ(*r.guidance_scale_2, 3.0);
  EXPECT_EQ(*r.fps, 16);
  // guidance_scale alone sets both experts' scale, as diffusers does.
  auto one = sized;
  one.guidance_scale = 5.0;
  EXPECT_EQ(*pipe().resolve(one).guidance_scale_2, 5.0);
  auto two = sized;
  two.guidance_scale_2 = 2.0;
  EXPECT_EQ(*pipe().resolve(two).guidance_scale, 4.0);
  EXPECT_EQ(*pipe().resolve(two).guidance_scale_2, 2.0);
  // The real default size is rejected here, naming the field (no silent rounding).
  try {
    pipe().resolve({.prompt = "a cat"});
    ADD_FAILURE() << "832 pixels fit a RoPE table of 32 patches";
  } catch (const InvalidRequest& e) {
    EXPECT_EQ(std::string(e.what()).rfind("width", 0), 0u) << e.what();
  }
}

TEST_F(WanRequestTest, ValidRequestRuns) {
  const auto out = engine_->generate(valid());
  EXPECT_EQ(out.frames.sizes(), (std::vector<std::int64_t>{1, 16, 32, 3}));
}

TEST_F(WanRequestTest, BadValuesNameTheField) {
  struct Case {
    const char* what;
    std::function<void(GenerationRequest&)> edit;
    const char* field;
  };
  const std::vector<Case> cases = {
      {"empty prompt", [](auto& r) { r.prompt.clear(); }, "prompt"},
      {"zero steps", [](auto& r) { r.steps = 0; }, "steps"},
      {"too many steps", [](auto& r) { r.steps = 1001; }, "steps"},
      {"width not a multiple of 16", [](auto& r) { r.width = 40; }, "width"},
      {"height not a multiple of 16", [](auto& r) { r.height = 24; }, "height"},
      {"zero width", [](auto& r) { r.width = 0; }, "width"},
      {"negative height", [](auto& r) { r.height = -16; }, "height"},
      {"height beyond the RoPE table", [](auto& r) { r.height = 16 * 33; }, "height"},
      {"num_frames not 4k+1", [](auto& r) { r.num_frames = 4; }, "num_frames"},
      {"zero frames", [](auto& r) { r.num_frames = 0; }, "num_frames"},
      {"nan guidance", [](auto& r) { r.guidance_scale = NAN; }, "guidance_scale"},
      {"inf guidance_scale_2", [](auto& r) { r.guidance_scale_2 = INFINITY; }, "guidance_scale_2"},
      {"fps", [](auto& r) { r.fps = 0; }, "fps"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    auto r = valid();
    c.edit(r);
    const auto message = rejection(r);
    EXPECT_EQ(message.rfind(c.field, 0), 0u) << message;
  }
  // Rejections moved nothing, and the engine still works.
  EXPECT_EQ(engine_->generate(valid()).frames.size(0), 1);
}

TEST_F(WanRequestTest, SingleExpertModelRejectsGuidanceScale2) {
  const auto dir = tiny_wan::make_pipeline(tiny_wan::temp_dir("single"), {.transformer_2 = false});
  auto loaded = pipelines::load_pipeline(dir.string());
  auto r = valid();
  r.guidance_scale_2 = 3.0;
  try {
    loaded->resolve(r);
    ADD_FAILURE() << "accepted";
  } catch (const InvalidRequest& e) {
    EXPECT_EQ(std::string(e.what()).rfind("guidance_scale_2", 0), 0u) << e.what();
  }
  fs::remove_all(dir);
}

// Note [omni_defaults.json]: a model directory sets its own request defaults.
TEST_F(WanRequestTest, OmniDefaultsFileSetsTheModelsDefaults) {
  const auto dir = tiny_wan::temp_dir("omni-defaults");
  fs::remove_all(dir);
  fs::copy(*dir_, dir, fs::copy_options::recursive);
  tiny_wan::write_json(dir / "omni_defaults.json", {{"width", 32},
                                                    {"height", 16},
                                                    {"num_frames", 5},
                                                    {"steps", 3},
                                                    {"guidance_scale", 2.5},
                                                    {"fps", 8}});
  auto pipe = std::dynamic_pointer_cast<WanPipeline>(pipelines::load_pipeline(dir.string()));
  ASSERT_NE(pipe, nullptr);
  const auto r = pipe->resolve({.prompt = "a cat"});
  EXPECT_EQ(*r.width, 32);
  EXPECT_EQ(*r.height, 16);
  EXPECT_EQ(*r.num_frames, 5);
  EXPECT_EQ(*r.steps, 3);
  EXPECT_EQ(*r.guidance_scale, 2.5);
  EXPECT_EQ(*r.guidance_scale_2, 3.0);  // not in the file: the Wan2.2 default stays
  EXPECT_EQ(*r.fps, 8);
  // A request still overrides the file.
  EXPECT_EQ(*pipe->resolve({.prompt = "a cat", .width = 48}).width, 48);

  EngineArgs args;
  args.model = dir.string();
  args.device = "sim";
  args.enable_cpu_offload = true;
  args.offload.quiet = true;
  Omni engine(args);
  EXPECT_EQ(engine.generate({.prompt = "a cat"}).frames.sizes(),
            (std::vector<std::int64_t>{5, 16, 32, 3}));
  fs::remove_all(dir);
}

TEST_F(WanRequestTest, BadOmniDefaultsFileIsAConfigErrorNamingIt) {
  const auto dir = tiny_wan::temp_dir("omni-defaults-bad");
  fs::remove_all(dir);
  fs::copy(*dir_, dir, fs::copy_options::recursive);
  struct Case {
    nlohmann::json file;
    const char* says;
  };
  const std::vector<Case> cases = {
      {{{"heigth", 16}}, "heigth"},                                   // unknown field
      {{{"width", 40}, {"height", 16}, {"num_frames", 1}}, "width"},  // no request could use it
      {{{"num_frames", 2.5}}, "num_frames"},                          // not an integer
      {nlohmann::json::array({1, 2}), "JSON object"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.file.dump());
    tiny_wan::write_json(dir / "omni_defaults.json", c.file);
    try {
      pipelines::load_pipeline(dir.string());
      ADD_FAILURE() << "loaded";
    } catch (const ConfigError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("omni_defaults.json"), std::string::npos) << message;
      EXPECT_NE(message.find(c.says), std::string::npos) << message;
    }
  }
  fs::remove_all(dir);
}
