// omni::inspect_model: plans from headers only, checked on a header-only
// Wan2.2-T2V-A14B directory (68 GB declared, no data written or read) and on
// the built-in example; plus the layouts that describe the A14B checkpoint,
// checked against real (small) modules.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <torch/torch.h>

#include <chrono>
#include <fstream>
#include <map>
#include <set>

#include "engine/wan_a14b_fixture.h"
#include "engine/wan_tensor_layout.h"
#include "omni/engine/inspect.h"
#include "omni/error.h"
#include "omni/io/checkpoint.h"
#include "omni/io/json_config.h"
#include "omni/io/tokenizer.h"
#include "omni/models/wan/autoencoder_kl_wan.h"
#include "omni/models/wan/umt5_encoder.h"
#include "omni/models/wan/wan_transformer.h"
#include "omni/offload/backend.h"
#include "omni/omni.h"
#include "omni/pipelines/wan_pipeline.h"
#include "support/run_process.h"

namespace fs = std::filesystem;
using namespace omni::models::wan;
using omni::io::DType;
using omni::offload::Role;
using omni::testing::TensorLayout;

// Named, not anonymous: in a unity build this file is included into another,
// and GCC warns of fixtures with internal linkage there (-Wsubobject-linkage).
namespace inspect_test {

constexpr std::uint64_t kExpertParameters = 14'288'491'584ull;
constexpr std::uint64_t kEncoderParameters = 5'680'910'336ull;

std::map<std::string, std::vector<std::int64_t>> as_map(const TensorLayout& layout) {
  std::map<std::string, std::vector<std::int64_t>> m;
  for (const auto& [name, shape] : layout) EXPECT_TRUE(m.emplace(name, shape).second) << name;
  return m;
}

std::map<std::string, std::vector<std::int64_t>> module_map(
    const torch::nn::Module& module, const std::vector<std::string>& skip_buffers = {}) {
  std::map<std::string, std::vector<std::int64_t>> m;
  for (const auto& [name, tensor] : omni::io::named_state(module, skip_buffers))
    m[name] = tensor.sizes().vec();
  return m;
}

fs::path data(const std::string& relative) {
  return fs::path(OMNI_TEST_DATA) / relative;
}

// The process's resident set, from /proc/self/status.
std::uint64_t resident_bytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  return 0;
}

// ---- The layouts are the architecture ---------------------------------------

TEST(WanTensorLayout, TransformerMatchesTheModule) {
  auto config = WanTransformer3DConfig::from_file(data("wan/wan_transformer/config.json"));
  for (bool cross_attn_norm : {true, false}) {
    config.cross_attn_norm = cross_attn_norm;
    WanTransformer3DModel model(config);
    const auto layout = omni::testing::wan_transformer_layout(config);
    EXPECT_EQ(as_map(layout),
              module_map(*model, WanTransformer3DModelImpl::non_persistent_buffers()));
    EXPECT_EQ(omni::testing::layout_numel(layout),
              static_cast<std::uint64_t>(WanTransformer3DModelImpl::parameter_count(config)));
  }
}

TEST(WanTensorLayout, TextEncoderMatchesTheModule) {
  auto config = UMT5Config::from_file(data("wan/umt5_encoder/config.json"));
  for (bool gated : {true, false}) {
    config.is_gated_act = gated;
    config.feed_forward_proj = gated ? "gated-gelu" : "relu";
    config.dense_act_fn = gated ? UMT5Activation::kGeluTanh : UMT5Activation::kRelu;
    UMT5EncoderModel model(config);
    auto expected = module_map(*model);
    // Tied: save_pretrained stores the embedding once, as shared.weight.
    ASSERT_TRUE(model->named_parameters()["encoder.embed_tokens.weight"].is_same(
        model->named_parameters()["shared.weight"]));
    expected.erase("encoder.embed_tokens.weight");
    const auto layout = omni::testing::umt5_encoder_layout(config);
    EXPECT_EQ(as_map(layout), expected);
    EXPECT_EQ(omni::testing::layout_numel(layout),
              static_cast<std::uint64_t>(UMT5EncoderModelImpl::parameter_count(config)));
  }
}

TEST(WanTensorLayout, VaeMatchesTheModule) {
  auto config = AutoencoderKLWanConfig::from_file(data("wan/wan_vae/config.json"));
  std::vector<AutoencoderKLWanConfig> variants{config};
  config.num_res_blocks = 2;
  config.temperal_downsample = {true, false, true};
  config.decoder_base_dim = 4;
  variants.push_back(config);
  for (const auto& c : variants) {
    AutoencoderKLWan model(c);
    const auto layout = omni::testing::autoencoder_kl_wan_layout(c);
    EXPECT_EQ(as_map(layout), module_map(*model));
    EXPECT_EQ(omni::testing::layout_numel(layout),
              static_cast<std::uint64_t>(AutoencoderKLWanImpl::parameter_count(c)));
  }
}

TEST(WanTensorLayout, A14BCountsMatchTheFacts) {
  using namespace omni::testing;
  const auto dit = WanTransformer3DConfig::from_json(a14b_transformer_config(), "a14b");
  EXPECT_EQ(layout_numel(wan_transformer_layout(dit)), kExpertParameters);
  const auto te = UMT5Config::from_json(a14b_text_encoder_config(), "a14b");
  EXPECT_EQ(layout_numel(umt5_encoder_layout(te)), kEncoderParameters);
  const auto vae = AutoencoderKLWanConfig::from_json(a14b_vae_config(), "a14b");
  const auto vae_count = layout_numel(autoencoder_kl_wan_layout(vae));
  EXPECT_EQ(vae_count, static_cast<std::uint64_t>(AutoencoderKLWanImpl::parameter_count(vae)));
  EXPECT_GT(vae_count, 126'800'000u);
  EXPECT_LT(vae_count, 127'000'000u);
}

// ---- A14B, headers only -----------------------------------------------------

class InspectA14B : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() /
                        ("omni_inspect_a14b_" + std::to_string(::getpid())));
    fs::remove_all(*dir_);
    if (!omni::testing::filesystem_keeps_holes(*dir_)) return;  // the tests skip
    omni::testing::write_a14b_directory(*dir_);
    ready_ = true;
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(*dir_, ec);
    delete dir_;
  }
  void SetUp() override {
    if (!ready_) GTEST_SKIP() << fs::temp_directory_path() << " does not keep sparse files";
  }
  static const fs::path& dir() { return *dir_; }

  static inline fs::path* dir_ = nullptr;
  static inline bool ready_ = false;
};

TEST_F(InspectA14B, TheFixtureIsHeadersAndHoles) {
  std::uint64_t declared = 0, allocated = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir())) {
    if (!e.is_regular_file() || e.path().extension() != ".safetensors") continue;
    struct stat st {};
    ASSERT_EQ(::stat(e.path().c_str(), &st), 0);
    declared += static_cast<std::uint64_t>(st.st_size);
    allocated += static_cast<std::uint64_t>(st.st_blocks) * 512;
  }
  EXPECT_GT(declared, 68'000'000'000ull);
  EXPECT_LT(allocated, 16ull << 20) << "the weights must not occupy disk blocks";
}

TEST_F(InspectA14B, ReportsTheArchitectureFromHeadersAlone) {
  const auto rss_before = resident_bytes();
  const auto start = std::chrono::steady_clock::now();
  const auto plan = omni::inspect_model(dir().string());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const auto rss_after = resident_bytes();
  RecordProperty("inspect_seconds", std::to_string(seconds));
  std::cout << "inspect_model on the A14B directory: " << seconds * 1e3 << " ms, RSS +"
            << (rss_after > rss_before ? (rss_after - rss_before) >> 10 : 0) << " KiB\n";
  // The time is recorded, not asserted (timings belong to bench/; this test
  // also runs under the sanitizers): that nothing is read shows in RSS.
  // Nothing of the 68 GB is mapped or read: the process grows by header JSON only.
  EXPECT_LT(rss_after, rss_before + (64ull << 20));

  EXPECT_EQ(plan.pipeline_class, "WanPipeline");
  EXPECT_FALSE(plan.builtin);
  std::vector<std::string> names;
  for (const auto& c : plan.components) names.push_back(c.name);
  EXPECT_EQ(names, (std::vector<std::string>{"scheduler", "text_encoder", "tokenizer",
                                             "transformer", "transformer_2", "vae"}));

  for (const char* name : {"scheduler", "tokenizer"}) {
    const auto* c = plan.component(name);
    ASSERT_NE(c, nullptr);
    EXPECT_FALSE(c->role.has_value()) << name;
    EXPECT_EQ(c->bytes, 0u);
  }
  for (const char* name : {"transformer", "transformer_2"}) {
    const auto* c = plan.component(name);
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->role, Role::dit);
    EXPECT_EQ(c->class_name, "WanTransformer3DModel");
    EXPECT_EQ(c->parameters, kExpertParameters);
    EXPECT_EQ(c->bytes, 2 * kExpertParameters);
    ASSERT_EQ(c->by_dtype.size(), 1u);
    EXPECT_EQ(c->by_dtype.at(DType::BF16).bytes, 2 * kExpertParameters);
    EXPECT_EQ(c->files.size(), 3u);  // 28.6 GB in 10 GB shards
    EXPECT_EQ(c->config_parameters, kExpertParameters);
    EXPECT_EQ(c->note, "");
  }
  const auto* te = plan.component("text_encoder");
  ASSERT_NE(te, nullptr);
  EXPECT_EQ(te->role, Role::encoder);
  EXPECT_EQ(te->parameters, kEncoderParameters);
  EXPECT_EQ(te->bytes, 2 * kEncoderParameters);
  EXPECT_EQ(te->config_parameters, kEncoderParameters);
  EXPECT_EQ(te->files.size(), 3u);
  EXPECT_EQ(te->note, "");

  const auto* vae = plan.component("vae");
  ASSERT_NE(vae, nullptr);
  EXPECT_EQ(vae->role, Role::vae);
  const auto vae_parameters = static_cast<std::uint64_t>(AutoencoderKLWanImpl::parameter_count(
      AutoencoderKLWanConfig::from_json(omni::testing::a14b_vae_config(), "a14b")));
  EXPECT_EQ(vae->parameters, vae_parameters);
  EXPECT_EQ(vae->bytes, 4 * vae_parameters);
  EXPECT_EQ(vae->by_dtype.count(DType::F32), 1u);
  EXPECT_EQ(vae->note, "");

  // max(encoder, largest DiT) + VAE, and the sum.
  // A DiT loads its bf16 weights and computes two float32 RoPE tables of
  // 1024 × 128 (Note [Buffers the model computes]).
  constexpr std::uint64_t kRope = 2 * 1024 * 128 * 4;
  const std::uint64_t dit = 2 * kExpertParameters + kRope, enc = 2 * kEncoderParameters,
                      vae_bytes = 4 * vae_parameters;
  EXPECT_EQ(plan.component("transformer")->computed_bytes, kRope);
  EXPECT_EQ(plan.planned_peak_with_offload_bytes, std::max(dit, enc) + vae_bytes);
  EXPECT_EQ(plan.planned_peak_without_offload_bytes, 2 * dit + enc + vae_bytes);
  EXPECT_EQ(plan.bytes + 2 * kRope, plan.planned_peak_without_offload_bytes);
  EXPECT_EQ(plan.parameters, 2 * kExpertParameters + kEncoderParameters + vae_parameters);
  EXPECT_EQ(plan.by_dtype.at(DType::BF16).parameters, 2 * kExpertParameters + kEncoderParameters);
  EXPECT_EQ(plan.by_dtype.at(DType::F32).parameters, vae_parameters);

  const auto json = plan.to_json();
  EXPECT_EQ(json["components"][3]["role"], "dit");
  EXPECT_TRUE(json["components"][0]["role"].is_null());
  EXPECT_EQ(json["planned_peak_with_offload_bytes"].get<std::uint64_t>(),
            plan.planned_peak_with_offload_bytes);
}

TEST_F(InspectA14B, TheBinaryPrintsTheTableAndWritesJson) {
  const auto json_path = dir() / "plan.json";
  const auto r = omni::testing::run_process(
      {OMNI_BINARY, "inspect", dir().string(), "--json", json_path.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  RecordProperty("binary_seconds", std::to_string(r.seconds));
  RecordProperty("binary_max_rss_kb", std::to_string(r.max_rss_kb));
  std::cout << r.out << "omni inspect took " << r.seconds << " s, peak RSS " << r.max_rss_kb / 1024
            << " MiB\n";
  EXPECT_NE(r.out.find("14,288,491,584"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("5,680,910,336"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("with model-level offload"), std::string::npos) << r.out;
  // Process start (LibTorch's shared libraries) dominates the time, which is
  // recorded, not asserted; the weights add nothing to the peak RSS.
  EXPECT_LT(r.max_rss_kb, 1024 * 1024) << "peak RSS " << r.max_rss_kb << " KiB";
  const auto json = nlohmann::json::parse(omni::testing::read_text_file(json_path.string()));
  EXPECT_EQ(json["pipeline_class"], "WanPipeline");
  EXPECT_EQ(json["components"][3]["parameters"].get<std::uint64_t>(), kExpertParameters);
  EXPECT_EQ(json["planned_peak_without_offload_bytes"].get<std::uint64_t>(),
            json["load_bytes"].get<std::uint64_t>());
}

// ---- Broken directories -----------------------------------------------------

class InspectErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("omni_inspect_err_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    // A tiny but complete pipeline: the fixture's configs and weights.
    fs::copy(data("wan/wan_pipeline"), dir_, fs::copy_options::recursive);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  template <typename E>
  std::string error_of() {
    try {
      omni::inspect_model(dir_.string());
    } catch (const E& e) {
      return e.what();
    }
    ADD_FAILURE() << "expected an error";
    return "";
  }
  fs::path dir_;
};

TEST_F(InspectErrors, TheTinyPipelineIsFine) {
  const auto plan = omni::inspect_model(dir_.string());
  // text_encoder and tokenizer are [null, null] in this model_index.json.
  ASSERT_EQ(plan.components.size(), 4u);
  const auto* dit = plan.component("transformer");
  ASSERT_NE(dit, nullptr);
  const auto config = WanTransformer3DConfig::from_file(dir_ / "transformer" / "config.json");
  EXPECT_EQ(dit->parameters,
            static_cast<std::uint64_t>(WanTransformer3DModelImpl::parameter_count(config)));
  EXPECT_EQ(dit->note, "");
  EXPECT_EQ(dit->load_bytes, dit->bytes + dit->computed_bytes);
  EXPECT_EQ(plan.planned_peak_with_offload_bytes,
            dit->load_bytes + plan.component("vae")->load_bytes);  // no encoder here
}

// Note [Tied weights in a checkpoint]: the reference UMT5 checkpoint stores
// the shared embedding as shared.weight and encoder.embed_tokens.weight; the
// loaded model holds it once, and so does the plan.
TEST_F(InspectErrors, TiedEmbeddingStoredTwiceCountsOnce) {
  fs::create_directory(dir_ / "text_encoder");
  fs::copy_file(data("wan/umt5_encoder/config.json"), dir_ / "text_encoder" / "config.json");
  fs::copy_file(data("wan/umt5_encoder/weights.safetensors"),
                dir_ / "text_encoder" / "model.safetensors");
  auto index = omni::io::read_json_file(dir_ / "model_index.json");
  index["text_encoder"] = {"transformers", "UMT5EncoderModel"};
  omni::testing::write_json(dir_ / "model_index.json", index);
  const auto header =
      omni::io::read_safetensors_header(dir_ / "text_encoder" / "model.safetensors");
  ASSERT_NE(header.find("shared.weight"), nullptr);
  ASSERT_NE(header.find("encoder.embed_tokens.weight"), nullptr);

  const auto plan = omni::inspect_model(dir_.string());
  const auto* te = plan.component("text_encoder");
  ASSERT_NE(te, nullptr);
  const auto config = UMT5Config::from_file(data("wan/umt5_encoder/config.json"));
  EXPECT_EQ(te->parameters,
            static_cast<std::uint64_t>(UMT5EncoderModelImpl::parameter_count(config)));
  EXPECT_EQ(te->tensors, header.tensors.size() - 1);
  EXPECT_EQ(te->bytes, 4 * te->parameters);  // float32
  EXPECT_EQ(te->note, "");
}

TEST_F(InspectErrors, MissingModelIndex) {
  fs::remove(dir_ / "model_index.json");
  EXPECT_NE(error_of<omni::FormatError>().find("model_index.json"), std::string::npos);
}

TEST_F(InspectErrors, ComponentWithoutWeights) {
  fs::remove(dir_ / "vae" / "weights.safetensors");
  const auto what = error_of<omni::FormatError>();
  EXPECT_NE(what.find("vae"), std::string::npos) << what;
  EXPECT_NE(what.find("no .safetensors"), std::string::npos) << what;
}

TEST_F(InspectErrors, MissingComponentFolder) {
  fs::remove_all(dir_ / "transformer_2");
  EXPECT_NE(error_of<omni::FormatError>().find("transformer_2"), std::string::npos);
}

TEST_F(InspectErrors, TruncatedSafetensors) {
  const auto file = dir_ / "transformer" / "weights.safetensors";
  fs::resize_file(file, fs::file_size(file) - 100);
  EXPECT_NE(error_of<omni::FormatError>().find("weights.safetensors"), std::string::npos);
}

TEST_F(InspectErrors, IndexNamingAMissingShard) {
  const auto d = dir_ / "transformer";
  fs::remove(d / "weights.safetensors");
  omni::testing::write_json(d / "diffusion_pytorch_model.safetensors.index.json",
                            {{"weight_map", {{"proj_out.weight", "absent.safetensors"}}}});
  EXPECT_NE(error_of<omni::FormatError>().find("absent.safetensors"), std::string::npos);
}

TEST_F(InspectErrors, IndexMappingATensorToTheWrongShard) {
  const auto d = dir_ / "transformer";
  fs::rename(d / "weights.safetensors", d / "shard-1.safetensors");
  nlohmann::json map;
  for (const auto& t : omni::io::read_safetensors_header(d / "shard-1.safetensors").tensors)
    map[t.name] = "shard-1.safetensors";
  map["not.in.the.shard"] = "shard-1.safetensors";
  omni::testing::write_json(d / "diffusion_pytorch_model.safetensors.index.json",
                            {{"weight_map", map}});
  EXPECT_NE(error_of<omni::FormatError>().find("not.in.the.shard"), std::string::npos);
}

TEST_F(InspectErrors, ShardOutsideTheFolder) {
  const auto d = dir_ / "transformer";
  fs::remove(d / "weights.safetensors");
  omni::testing::write_json(d / "diffusion_pytorch_model.safetensors.index.json",
                            {{"weight_map", {{"proj_out.weight", "../vae/weights.safetensors"}}}});
  EXPECT_NE(error_of<omni::FormatError>().find("plain file name"), std::string::npos);
}

TEST_F(InspectErrors, ConfigThatDisagreesWithTheWeightsIsANote) {
  auto config = omni::io::read_json_file(dir_ / "transformer" / "config.json");
  config["num_layers"] = 3;
  omni::testing::write_json(dir_ / "transformer" / "config.json", config);
  const auto plan = omni::inspect_model(dir_.string());
  EXPECT_NE(plan.component("transformer")->note.find("implies"), std::string::npos)
      << plan.component("transformer")->note;
  EXPECT_EQ(plan.component("transformer_2")->note, "");
}

// Found by fuzz/model_index_fuzz.cpp: a component name longer than the file
// system allows made the folder's stat fail with ENAMETOOLONG, and the
// std::filesystem_error escaped every typed catch.
TEST_F(InspectErrors, ComponentNameTheFileSystemRefusesIsAFormatError) {
  auto index = omni::io::read_json_file(dir_ / "model_index.json");
  const std::string name(300, 'c');
  index[name] = {"diffusers", "SomeModel"};
  omni::testing::write_json(dir_ / "model_index.json", index);
  const auto what = error_of<omni::FormatError>();
  EXPECT_NE(what.find(name), std::string::npos) << what;
  EXPECT_NE(what.find("too long"), std::string::npos) << what;
}

TEST(Inspect, UnknownModels) {
  EXPECT_THROW(omni::inspect_model("example:nope"), omni::ConfigError);
  EXPECT_THROW(omni::inspect_model("/definitely/not/here"), omni::ConfigError);
  EXPECT_THROW(omni::inspect_model(""), omni::ConfigError);
}

// ---- The built-in example: counted from the module --------------------------

TEST(Inspect, BuiltInExampleMatchesWhatOffloadPlans) {
  const auto plan = omni::inspect_model("example:wan-shaped");
  EXPECT_TRUE(plan.builtin);
  std::vector<std::string> names;
  for (const auto& c : plan.components) names.push_back(c.name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"text_encoder", "transformer", "transformer_2", "vae"}));
  EXPECT_EQ(plan.component("text_encoder")->role, Role::encoder);
  EXPECT_EQ(plan.component("transformer")->role, Role::dit);
  EXPECT_EQ(plan.component("transformer_2")->role, Role::dit);
  EXPECT_EQ(plan.component("vae")->role, Role::vae);
  for (const auto& c : plan.components) {
    EXPECT_GT(c.parameters, 0u) << c.name;
    EXPECT_EQ(c.bytes, 4 * c.parameters) << c.name;  // float32
  }
  // The same numbers the offload backend plans when it is enabled.
  omni::EngineArgs args;
  args.model = "example:wan-shaped";
  args.enable_cpu_offload = true;
  args.device = "sim";
  args.offload.quiet = true;
  omni::Omni engine(args);
  const auto report = engine.offload_report();
  EXPECT_EQ(plan.planned_peak_with_offload_bytes, report.planned_peak_bytes);
  EXPECT_EQ(plan.planned_peak_without_offload_bytes, report.planned_peak_without_offload_bytes);
  for (const auto& c : report.components)
    EXPECT_EQ(plan.component(c.name)->bytes, c.bytes) << c.name;
}

}  // namespace inspect_test
using namespace inspect_test;

// Note [Mapped homes] on the real configs: without a budget every home is
// pinned (the weights' whole size); under one, the pinned part stays within
// it and the rest is the mapped checkpoint.
TEST_F(InspectA14B, HostMemoryPlanWithAndWithoutABudget) {
  const auto unbudgeted = omni::inspect_model(dir().string());
  EXPECT_FALSE(unbudgeted.host_plan.maps_any());
  EXPECT_EQ(unbudgeted.host_plan.pinned_bytes(), unbudgeted.load_bytes);
  EXPECT_GT(unbudgeted.host_plan.pinned_bytes(), 68'000'000'000ull) << "both experts + encoder";

  omni::InspectOptions options;
  options.host_memory_budget_bytes = 32ull << 30;
  const auto budgeted = omni::inspect_model(dir().string(), options);
  const auto& plan = budgeted.host_plan;
  EXPECT_LE(plan.pinned_bytes(), 32ull << 30);
  EXPECT_EQ(plan.kind_of("transformer"), omni::offload::HomeKind::pinned) << "28.6 GB fit";
  EXPECT_EQ(plan.kind_of("transformer_2"), omni::offload::HomeKind::mapped);
  EXPECT_EQ(plan.kind_of("text_encoder"), omni::offload::HomeKind::mapped);
  EXPECT_EQ(plan.pinned_bytes() - plan.staging_bytes + plan.mapped_bytes(),
            unbudgeted.host_plan.pinned_bytes());

  // The CLI shows the same plan (and, with OMNI_PRINT_A14B_PLAN, prints it).
  for (const char* budget : {"", "32GiB", "16GiB"}) {
    std::vector<std::string> args = {OMNI_BINARY, "inspect", dir().string()};
    if (*budget) args.insert(args.end(), {"--host-memory-budget", budget});
    const auto r = omni::testing::run_process(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("host memory for weights"), std::string::npos) << r.out;
    if (std::getenv("OMNI_PRINT_A14B_PLAN")) std::printf("%s\n", r.out.c_str());
  }
}

// ---- The device plan (omni inspect --device-memory-budget) -------------------

namespace inspect_test {

fs::path tiny_shapes() {
  return fs::path(OMNI_SOURCE_DIR) / "models" / "tiny-shapes";
}

std::uint64_t sum_load_bytes(const omni::ModelPlan& plan) {
  std::uint64_t total = 0;
  for (const auto& c : plan.components) total += c.load_bytes;
  return total;
}

const omni::offload::ModeEstimate& mode(const omni::DevicePlan& d, omni::offload::PolicyKind k) {
  for (const auto& m : d.modes)
    if (m.kind == k) return m;
  throw std::runtime_error("no such mode");
}

}  // namespace inspect_test
using namespace inspect_test;

// The block groups read off a checkpoint's tensor names are the ones the
// loaded modules give (Note [Block groups]), and a default request's calls
// read from the directory are the loaded pipeline's.
TEST(InspectDevicePlan, NamesGiveTheLoadedModulesGroupsAndCalls) {
  if (!omni::io::Tokenizer::available()) GTEST_SKIP() << "built without OMNI_WITH_TOKENIZER";
  const auto plan = omni::inspect_model(tiny_shapes().string());
  const auto pipe = omni::pipelines::WanPipeline::load(tiny_shapes());
  for (const auto& r : omni::offload::resolve_components(*pipe, pipe->components(), false)) {
    const auto loaded = omni::offload::measure_component(r.path, r.role, *r.module);
    const auto* c = plan.component(r.path);
    ASSERT_NE(c, nullptr) << r.path;
    EXPECT_EQ(c->load_bytes, loaded.bytes) << r.path;
    EXPECT_EQ(c->block_bytes, loaded.block_bytes) << r.path;
    EXPECT_EQ(c->largest_block, loaded.largest_block) << r.path;
    EXPECT_EQ(c->largest_group, loaded.largest_group) << r.path;
  }
  EXPECT_GT(plan.component("transformer")->block_bytes, 0u);
  EXPECT_GT(plan.component("text_encoder")->block_bytes, 0u) << "encoder.block.N";
  omni::pipelines::GenerationRequest probe;
  probe.prompt = "a red circle";
  EXPECT_EQ(omni::pipelines::WanPipeline::default_call_schedule(tiny_shapes()),
            pipe->call_schedule(pipe->resolve(probe)));
}

// What inspect plans is what `--offload auto` picks once the model loads, at
// budgets around the sizes that separate the modes; where inspect finds no
// mode, loading fails too. tiny-shapes has a directory's headers (its VAE is
// too large beside a DiT's fixed part for layerwise); the built-in example
// reaches layerwise.
TEST(InspectDevicePlan, PicksWhatOffloadAutoPicksWhenLoaded) {
  if (!omni::io::Tokenizer::available()) GTEST_SKIP() << "built without OMNI_WITH_TOKENIZER";
  std::set<omni::offload::PolicyKind> seen;
  for (const auto& model : {tiny_shapes().string(), std::string("example:wan-shaped")}) {
    const auto sizes = omni::inspect_model(model);
    const auto total = sum_load_bytes(sizes);
    const auto dit = sizes.component("transformer")->load_bytes;
    const auto vae = sizes.component("vae")->load_bytes;
    for (const auto budget : {total + 1, total - 1, dit + vae + 1, dit - 1}) {
      omni::InspectOptions options;
      options.device_memory_budget_bytes = budget;
      const auto plan = omni::inspect_model(model, options);
      ASSERT_TRUE(plan.device_plan);
      const auto& d = *plan.device_plan;
      omni::EngineArgs args;
      args.model = model;
      args.device = "sim";
      args.offload_auto = true;
      args.offload.device_memory_budget = budget;
      args.offload.quiet = true;
      if (!d.choice) {
        EXPECT_THROW(omni::Omni{args}, omni::ConfigError) << model << " " << budget;
        continue;
      }
      omni::Omni engine(args);
      ASSERT_TRUE(engine.offload_choice());
      EXPECT_EQ(d.choice->kind, engine.offload_choice()->kind) << model << " " << budget;
      EXPECT_EQ(d.choice->bytes_per_request, engine.offload_choice()->bytes_per_request) << model;
      EXPECT_EQ(d.choice->why, engine.offload_choice()->why) << model;
      seen.insert(d.choice->kind);
      // The chosen mode's row agrees, and every mode that runs stays within the budget.
      EXPECT_TRUE(mode(d, d.choice->kind).runs);
      for (const auto& m : d.modes)
        if (m.runs) EXPECT_LE(m.planned_peak_bytes, budget) << to_string(m.kind);
    }
  }
  EXPECT_TRUE(seen.contains(omni::offload::PolicyKind::all_resident));
  EXPECT_TRUE(seen.contains(omni::offload::PolicyKind::budget));
  EXPECT_TRUE(seen.contains(omni::offload::PolicyKind::layerwise));
}

// The real configs: a 24 GB card cannot hold one 28.6 GB expert, so only
// layerwise runs; a 48 GB card holds the encoder beside an expert, so the
// budget keeps it across phases and uploads less than model-level swaps; an
// 80 GB card holds everything.
TEST_F(InspectA14B, DevicePlanOnCardsOfEachSize) {
  const auto plan_for = [&](std::uint64_t budget) {
    omni::InspectOptions options;
    options.device_memory_budget_bytes = budget;
    auto plan = omni::inspect_model(dir().string(), options);
    EXPECT_TRUE(plan.device_plan);
    return plan;
  };
  using omni::offload::PolicyKind;
  const auto small = plan_for(20ull << 30);
  const auto& expert = *small.component("transformer");
  EXPECT_EQ(expert.largest_block * 40, expert.block_bytes) << "40 blocks of one size";
  EXPECT_GT(expert.load_bytes - expert.block_bytes, 0u);
  EXPECT_LT(expert.load_bytes - expert.block_bytes, expert.load_bytes / 20);
  const auto& d = *small.device_plan;
  std::map<std::string, int> calls;
  for (const auto& c : d.calls) ++calls[c];
  EXPECT_EQ(calls["text_encoder"], 2);
  EXPECT_EQ(calls["transformer"] + calls["transformer_2"], 80) << "40 steps with CFG";
  EXPECT_GT(calls["transformer"], 0);
  EXPECT_GT(calls["transformer_2"], 0);
  EXPECT_EQ(calls["vae"], 1);
  ASSERT_TRUE(d.choice) << d.no_choice;
  EXPECT_EQ(d.choice->kind, PolicyKind::layerwise);
  EXPECT_FALSE(mode(d, PolicyKind::all_resident).runs);
  EXPECT_FALSE(mode(d, PolicyKind::model_level).runs);
  EXPECT_FALSE(mode(d, PolicyKind::budget).runs);
  const auto& layerwise = mode(d, PolicyKind::layerwise);
  EXPECT_LE(layerwise.planned_peak_bytes, 20ull << 30);
  // Every DiT call streams its expert's blocks.
  EXPECT_GE(layerwise.bytes_per_request, 80 * expert.block_bytes);
  EXPECT_NE(d.placement.at("transformer").find("blocks stream"), std::string::npos);

  const auto mid = plan_for(48ull << 30);
  const auto& m = *mid.device_plan;
  ASSERT_TRUE(m.choice);
  EXPECT_EQ(m.choice->kind, PolicyKind::budget);
  EXPECT_LT(mode(m, PolicyKind::budget).bytes_per_request,
            mode(m, PolicyKind::model_level).bytes_per_request);
  EXPECT_EQ(m.placement.at("text_encoder"), "stays resident");
  EXPECT_EQ(m.placement.at("transformer"), "uploaded once per request");

  const auto large = plan_for(80ull << 30);
  ASSERT_TRUE(large.device_plan->choice);
  EXPECT_EQ(large.device_plan->choice->kind, PolicyKind::all_resident);
  EXPECT_EQ(mode(*large.device_plan, PolicyKind::all_resident).planned_peak_bytes,
            sum_load_bytes(large));

  // The CLI prints both tables and the pick; the JSON carries the same.
  const auto r = omni::testing::run_process(
      {OMNI_BINARY, "inspect", dir().string(), "--device-memory-budget", "20GiB", "--json", "-"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto json = nlohmann::json::parse(r.out);
  EXPECT_EQ(json["device_plan"]["auto"]["mode"], "layerwise");
  EXPECT_EQ(json["device_plan"]["auto"]["bytes_per_request"], layerwise.bytes_per_request);
  const auto table = omni::testing::run_process(
      {OMNI_BINARY, "inspect", dir().string(), "--device-memory-budget", "20GiB"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("where the weights live"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("--offload auto: layerwise"), std::string::npos) << table.out;
  if (std::getenv("OMNI_PRINT_A14B_PLAN")) std::printf("%s\n", table.out.c_str());
}
