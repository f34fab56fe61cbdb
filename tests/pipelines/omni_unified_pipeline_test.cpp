// OmniUnifiedPipeline end to end on a tiny random directory written here:
// loading through load_pipeline, the split-model offload contract on the sim
// device (bitwise parity, one upload of each sub-component per request,
// never both resident, explicit selections), strict loading, request
// validation, and `omni generate --enable-cpu-offload`.
#include "omni/pipelines/omni_unified_pipeline.h"

#include <gtest/gtest.h>

#include <set>

#include "omni/engine/inspect.h"
#include "omni/error.h"
#include "omni/omni.h"
#include "pipelines/tiny_unified.h"
#include "support/run_process.h"
#include "support/text.h"

using namespace omni;
using offload::Residency;
using offload::ResidencyEvent;
using omni::testing::contains;
using pipelines::OmniUnifiedPipeline;

// Named, not anonymous: in a unity build this file is included into another,
// and GCC warns of fixtures with internal linkage there (-Wsubobject-linkage).
namespace omni_unified_pipeline_test {

namespace fs = std::filesystem;

// One tiny directory per process; tests that break it work on copies.
// (tiny_wan::CleanUp, registered in wan_pipeline_test.cpp, removes them.)
const fs::path& unified_dir() {
  static const fs::path dir = [] {
    auto d = tiny_wan::temp_dir("unified");
    return tiny_unified::make_pipeline(d);
  }();
  return dir;
}

fs::path copy_of_unified(const std::string& tag) {
  const auto dir = tiny_wan::temp_dir(tag);
  fs::remove_all(dir);
  fs::copy(unified_dir(), dir, fs::copy_options::recursive);
  return dir;
}

class OmniUnifiedPipelineTest : public tiny_wan::TextPipelineTest {};

using tiny_wan::engine_args;

GenerationRequest unified_request(std::uint64_t seed = 5) {
  GenerationRequest r;
  r.prompt = "a red circle moving right";
  r.negative_prompt = "blurry, low quality";
  r.seed = seed;
  return r;  // omni_defaults.json: 32×32, 5 frames, 3 steps, guidance 4
}

std::shared_ptr<OmniUnifiedPipeline> load_unified(const fs::path& dir) {
  auto p = std::dynamic_pointer_cast<OmniUnifiedPipeline>(pipelines::load_pipeline(dir.string()));
  EXPECT_NE(p, nullptr);
  return p;
}

std::unique_ptr<device::Device> sim() {
  return device::make_device(device::DeviceSpec::parse("sim"), true, {});
}

Residency where(const offload::OffloadBackend& b, const std::string& name) {
  const auto index = b.ledger().find(name);
  EXPECT_TRUE(index.has_value()) << name;
  return b.ledger().entries()[*index].where;
}

// Runs one request on `pipe` with `backend`'s per-request accounting.
torch::Tensor run(OmniUnifiedPipeline& pipe, device::Device& device,
                  offload::OffloadBackend* backend, std::uint64_t seed = 5) {
  if (backend) backend->begin_request();
  torch::NoGradGuard no_grad;
  return pipe.run(pipe.resolve(unified_request(seed)), {device.compute_device(), {}}).frames;
}

template <typename E>
std::string load_error(const fs::path& dir) {
  try {
    pipelines::load_pipeline(dir.string());
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong error type: ") + e.what();
  }
  return "loaded";
}

void edit_json(const fs::path& path, const std::function<void(nlohmann::json&)>& edit) {
  auto json = io::read_json_file(path);
  edit(json);
  tiny_wan::write_json(path, json);
}

}  // namespace omni_unified_pipeline_test
using namespace omni_unified_pipeline_test;

TEST_F(OmniUnifiedPipelineTest, RegisteredUnderItsClassName) {
  auto pipe = load_unified(unified_dir());
  ASSERT_NE(pipe, nullptr);
  EXPECT_EQ(pipe->class_name(), "OmniUnifiedPipeline");
  const auto spec = pipe->components();
  EXPECT_EQ(spec.dit_modules, (std::vector<std::string>{"transformer.generator"}));
  EXPECT_EQ(spec.encoder_modules, (std::vector<std::string>{"transformer.reasoner"}));
  EXPECT_EQ(spec.vae_modules, (std::vector<std::string>{"vae"}));
  EXPECT_EQ(OmniUnifiedPipeline::split_component_names(),
            (std::vector<std::string>{"reasoner", "generator"}));
  const auto r = pipe->resolve({.prompt = "a cat"});
  EXPECT_EQ(*r.width, 32);
  EXPECT_EQ(*r.height, 32);
  EXPECT_EQ(*r.num_frames, 5);
  EXPECT_EQ(*r.steps, 3);
  EXPECT_EQ(*r.guidance_scale, 4.0);
  EXPECT_FALSE(r.guidance_scale_2.has_value());
  // The prompts' hidden states: [B, max_tokens, reasoner_dim], zero past each prompt.
  torch::NoGradGuard no_grad;
  const std::vector<std::string> prompts = {"a red circle", "a blue square"};
  const auto hidden = pipe->encode_prompt(prompts, torch::kCPU);
  EXPECT_EQ(hidden.sizes(), (std::vector<std::int64_t>{2, 16, 16}));
  const auto tokenizer = io::Tokenizer::from_file(unified_dir() / "tokenizer" / "spiece.model");
  const auto lengths = tokenizer.tokenize(prompts, 16).lengths;
  for (std::int64_t row = 0; row < 2; ++row) {
    const auto nonzero = hidden[row].abs().amax(-1) > 0;
    const auto length = lengths[static_cast<std::size_t>(row)];
    EXPECT_TRUE(nonzero.narrow(0, 0, length).all().item<bool>()) << row;
    EXPECT_FALSE(nonzero.narrow(0, length, 16 - length).any().item<bool>()) << row;
  }
}

TEST_F(OmniUnifiedPipelineTest, SameSeedBitwiseIdenticalWithAndWithoutOffload) {
  Omni with(engine_args(unified_dir(), true));
  Omni without(engine_args(unified_dir(), false));
  ASSERT_NE(with.backend(), nullptr);
  EXPECT_EQ(with.backend()->strategy(), "model-level");
  // At enable only the VAE went up: both sub-components wait on the host.
  EXPECT_EQ(with.backend()->ledger().log(),
            (std::vector<ResidencyEvent>{{"vae", Residency::device}}));
  EXPECT_EQ(where(*with.backend(), "reasoner"), Residency::host);
  EXPECT_EQ(where(*with.backend(), "generator"), Residency::host);
  const_cast<offload::ResidencyLedger&>(with.backend()->ledger()).clear_log();

  const auto a = with.generate(unified_request());
  const auto b = without.generate(unified_request());
  ASSERT_EQ(a.frames.sizes(), (std::vector<std::int64_t>{5, 32, 32, 3}));
  EXPECT_EQ(a.frames.scalar_type(), torch::kUInt8);
  EXPECT_TRUE(torch::equal(a.frames, b.frames)) << "offload changed the output";
  EXPECT_GT(a.frames.to(torch::kFloat).std().item<double>(), 1.0) << "a flat picture";

  // The reasoner leaves before the generator arrives; each goes up once.
  EXPECT_EQ(with.backend()->ledger().log(),
            (std::vector<ResidencyEvent>{{"reasoner", Residency::device},
                                         {"reasoner", Residency::host},
                                         {"generator", Residency::device}}));
  const auto& r = a.report;
  EXPECT_EQ(r.strategy, "model-level");
  EXPECT_TRUE(r.stand_in);
  EXPECT_EQ(r.component("reasoner")->uploads, 1u);
  EXPECT_EQ(r.component("generator")->uploads, 1u);
  EXPECT_EQ(r.component("vae")->uploads, 0u) << "the VAE is never swapped";
  EXPECT_EQ(r.component("reasoner")->role, offload::Role::split);
  EXPECT_EQ(r.component("vae")->role, offload::Role::resident);
  EXPECT_EQ(r.d2h_bytes, 0u);
  const auto reasoner_bytes = r.component("reasoner")->bytes;
  const auto generator_bytes = r.component("generator")->bytes;
  EXPECT_GT(reasoner_bytes, 0u);
  EXPECT_GT(generator_bytes, 0u);
  std::vector<std::string> moved;
  for (const auto& t : r.transfers) moved.push_back(t.component);
  EXPECT_EQ(moved, (std::vector<std::string>{"reasoner", "generator"}));
  // Never both resident: the peak is the larger of the two plus the VAE.
  EXPECT_EQ(r.peak_resident_bytes,
            std::max(reasoner_bytes, generator_bytes) + r.component("vae")->bytes);
  EXPECT_EQ(r.peak_resident_bytes, r.planned_peak_bytes);

  // A second request: the same frames, and again one upload of each.
  const_cast<offload::ResidencyLedger&>(with.backend()->ledger()).clear_log();
  const auto c = with.generate(unified_request());
  EXPECT_TRUE(torch::equal(a.frames, c.frames));
  EXPECT_EQ(c.report.component("reasoner")->uploads, 1u);
  EXPECT_EQ(c.report.component("generator")->uploads, 1u);
  EXPECT_EQ(with.backend()->ledger().log(),
            (std::vector<ResidencyEvent>{{"generator", Residency::host},
                                         {"reasoner", Residency::device},
                                         {"reasoner", Residency::host},
                                         {"generator", Residency::device}}));

  const auto d = with.generate(unified_request(6));
  EXPECT_FALSE(torch::equal(a.frames, d.frames)) << "another seed must change the output";
  auto other = unified_request();
  other.prompt = "a blue square moving left";
  EXPECT_FALSE(torch::equal(a.frames, with.generate(other).frames))
      << "the prompt must reach the generator";

  // The plain CPU run (no device, no hooks) agrees too.
  Omni cpu(engine_args(unified_dir(), false, "cpu"));
  EXPECT_TRUE(torch::equal(cpu.generate(unified_request()).frames, a.frames));
}

TEST_F(OmniUnifiedPipelineTest, OnlyTheRunningSubComponentIsResident) {
  auto pipe = load_unified(unified_dir());
  auto device = sim();
  offload::ModelLevelOffloadBackend backend(*device, {.quiet = true});
  backend.enable(*pipe, pipe->components());
  ASSERT_NE(pipe->offload_host(), nullptr);
  // Probes: pre-forward hooks run inside the offload context, just before
  // each sub-component computes.
  int reasoner_calls = 0, generator_calls = 0;
  auto reasoner_probe = pipe->transformer->reasoner->register_forward_pre_hook([&](nn::Module&) {
    ++reasoner_calls;
    EXPECT_EQ(where(backend, "reasoner"), Residency::device);
    EXPECT_EQ(where(backend, "generator"), Residency::host);
    EXPECT_EQ(where(backend, "vae"), Residency::device);
  });
  auto generator_probe = pipe->transformer->generator->register_forward_pre_hook([&](nn::Module&) {
    ++generator_calls;
    EXPECT_EQ(where(backend, "generator"), Residency::device);
    EXPECT_EQ(where(backend, "reasoner"), Residency::host);
    EXPECT_EQ(where(backend, "vae"), Residency::device);
  });
  for (int request_number = 0; request_number < 2; ++request_number) {
    SCOPED_TRACE(request_number);
    reasoner_calls = generator_calls = 0;
    run(*pipe, *device, &backend);
    auto report = backend.end_request();
    EXPECT_EQ(reasoner_calls, 1) << "the reasoner reads the prompts once";
    EXPECT_EQ(generator_calls, 2 * 3) << "cond + uncond, 3 steps";
    EXPECT_EQ(report.component("reasoner")->uploads, 1u);
    EXPECT_EQ(report.component("generator")->uploads, 1u);
    EXPECT_NO_THROW(backend.ledger().verify());
  }
  backend.disable();
  EXPECT_EQ(pipe->offload_host(), nullptr);
}

TEST_F(OmniUnifiedPipelineTest, EnableAndDisableAreIdempotentAndLeaveNoContext) {
  auto reference = load_unified(unified_dir());
  auto device = sim();
  const auto expected = run(*reference, *device, nullptr);
  auto pipe = load_unified(unified_dir());
  offload::ModelLevelOffloadBackend backend(*device, {.quiet = true});
  backend.enable(*pipe, pipe->components());
  backend.enable(*pipe, pipe->components());
  EXPECT_TRUE(torch::equal(run(*pipe, *device, &backend), expected));
  backend.disable();
  backend.disable();
  EXPECT_EQ(pipe->offload_host(), nullptr) << "no model-local context survives disable";
  for (auto& p : pipe->parameters()) EXPECT_FALSE(device::is_unusable_placeholder(p));
  EXPECT_TRUE(torch::equal(run(*pipe, *device, nullptr), expected));
}

TEST_F(OmniUnifiedPipelineTest, ExplicitSelectionIsHonoured) {
  auto reference = load_unified(unified_dir());
  auto device = sim();
  const auto expected = run(*reference, *device, nullptr);
  auto pipe = load_unified(unified_dir());
  offload::ModelLevelOffloadBackend backend(*device,
                                            {.quiet = true, .split_components = {"generator"}});
  backend.enable(*pipe, pipe->components());
  EXPECT_EQ(where(backend, "reasoner"), Residency::device) << "unselected: stays resident";
  EXPECT_EQ(where(backend, "generator"), Residency::host);
  EXPECT_TRUE(torch::equal(run(*pipe, *device, &backend), expected));
  const auto report = backend.end_request();
  EXPECT_EQ(where(backend, "reasoner"), Residency::device);
  EXPECT_EQ(report.component("reasoner")->uploads, 0u);
  EXPECT_EQ(report.component("generator")->uploads, 1u);
}

TEST_F(OmniUnifiedPipelineTest, UnknownSelectionIsRejectedBeforeAnySetup) {
  auto reference = load_unified(unified_dir());
  auto device = sim();
  const auto expected = run(*reference, *device, nullptr);
  auto pipe = load_unified(unified_dir());
  offload::ModelLevelOffloadBackend backend(
      *device, {.quiet = true, .split_components = {"generator", "planner"}});
  try {
    backend.enable(*pipe, pipe->components());
    ADD_FAILURE() << "an unknown split component was accepted";
  } catch (const ConfigError& e) {
    const std::string message = e.what();
    EXPECT_TRUE(contains(message, "'planner'")) << message;
    EXPECT_TRUE(contains(message, "reasoner, generator")) << message;
  }
  EXPECT_FALSE(backend.enabled());
  EXPECT_EQ(pipe->offload_host(), nullptr);
  EXPECT_TRUE(backend.ledger().entries().empty()) << "nothing was registered";
  EXPECT_EQ(device->memory_stats().allocated_bytes, 0u);
  EXPECT_TRUE(torch::equal(run(*pipe, *device, nullptr), expected));
}

TEST_F(OmniUnifiedPipelineTest, RequestsAreValidatedNamingTheField) {
  auto pipe = load_unified(unified_dir());
  const auto rejection = [&](const GenerationRequest& r) -> std::string {
    try {
      pipe->resolve(r);
    } catch (const InvalidRequest& e) {
      return e.what();
    }
    return "accepted";
  };
  struct Case {
    const char* what;
    std::function<void(GenerationRequest&)> edit;
    const char* field;
  };
  const std::vector<Case> cases = {
      {"guidance_scale_2", [](auto& r) { r.guidance_scale_2 = 3.0; }, "guidance_scale_2"},
      {"empty prompt", [](auto& r) { r.prompt.clear(); }, "prompt"},
      {"zero steps", [](auto& r) { r.steps = 0; }, "steps"},
      {"width not a multiple of 16", [](auto& r) { r.width = 40; }, "width"},
      {"height beyond the RoPE table", [](auto& r) { r.height = 16 * 33; }, "height"},
      {"num_frames not 4k+1", [](auto& r) { r.num_frames = 4; }, "num_frames"},
      {"nan guidance", [](auto& r) { r.guidance_scale = NAN; }, "guidance_scale"},
      {"fps", [](auto& r) { r.fps = 0; }, "fps"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    auto r = unified_request();
    c.edit(r);
    const auto message = rejection(r);
    EXPECT_EQ(message.rfind(c.field, 0), 0u) << message;
  }
  EXPECT_EQ(rejection(unified_request()), "accepted");
}

TEST_F(OmniUnifiedPipelineTest, LoadingIsStrictAndNamesThePartAtFault) {
  {
    const auto dir = copy_of_unified("unknown_field");
    edit_json(dir / "model_index.json", [](auto& i) {
      i["text_encoder"] = {"transformers", "UMT5EncoderModel"};
    });
    const auto message = load_error<ConfigError>(dir);
    EXPECT_TRUE(contains(message, "'text_encoder'")) << message;
  }
  {
    const auto dir = copy_of_unified("wrong_class");
    edit_json(dir / "model_index.json", [](auto& i) {
      i["transformer"] = {"diffusers", "WanTransformer3DModel"};
    });
    const auto message = load_error<ConfigError>(dir);
    EXPECT_TRUE(contains(message, "OmniUnifiedPipeline supports OmniUnifiedTransformer"))
        << message;
  }
  {
    const auto dir = copy_of_unified("no_tokenizer");
    edit_json(dir / "model_index.json", [](auto& i) { i["tokenizer"] = {nullptr, nullptr}; });
    const auto message = load_error<ConfigError>(dir);
    EXPECT_TRUE(contains(message, "'tokenizer' is required")) << message;
  }
  {
    const auto dir = copy_of_unified("missing_folder");
    fs::remove_all(dir / "transformer");
    const auto message = load_error<FormatError>(dir);
    EXPECT_TRUE(contains(message, "transformer")) << message;
  }
  {
    const auto dir = copy_of_unified("bad_config");
    edit_json(dir / "transformer" / "config.json", [](auto& c) { c["reasoner_heads"] = 5; });
    const auto message = load_error<ConfigError>(dir);
    EXPECT_TRUE(contains(message, "component 'transformer'")) << message;
    EXPECT_TRUE(contains(message, "'reasoner_heads'")) << message;
  }
  {
    const auto dir = copy_of_unified("channels");
    edit_json(dir / "transformer" / "config.json", [](auto& c) {
      c["generator"]["in_channels"] = 8;
      c["generator"]["out_channels"] = 8;
    });
    const auto message = load_error<ConfigError>(dir);
    EXPECT_TRUE(contains(message, "z_dim (4)")) << message;
  }
  {
    const auto dir = copy_of_unified("missing_tensor");
    const auto file = dir / "transformer" / "diffusion_pytorch_model.safetensors";
    auto tensors = io::load_safetensors(file);
    std::erase_if(tensors, [](const auto& e) { return e.first == "reasoner.norm_out.weight"; });
    io::save_safetensors(file, tensors);
    const auto message = load_error<FormatError>(dir);
    EXPECT_TRUE(contains(message, "component 'transformer'")) << message;
    EXPECT_TRUE(contains(message, "reasoner.norm_out.weight")) << message;
  }
  {
    const auto dir = copy_of_unified("small_vocab");
    edit_json(dir / "transformer" / "config.json", [](auto& c) { c["vocab_size"] = 8; });
    const auto message = load_error<ConfigError>(dir);
    EXPECT_TRUE(contains(message, "the reasoner embeds only 8")) << message;
  }
  {
    const auto dir = copy_of_unified("defaults_guidance_2");
    tiny_wan::write_json(dir / "omni_defaults.json", {{"guidance_scale_2", 3.0}});
    const auto message = load_error<ConfigError>(dir);
    EXPECT_TRUE(contains(message, "omni_defaults.json")) << message;
    EXPECT_TRUE(contains(message, "'guidance_scale_2'")) << message;
  }
  {
    const auto dir = copy_of_unified("defaults_unusable");
    tiny_wan::write_json(dir / "omni_defaults.json", {{"width", 40}});
    const auto message = load_error<ConfigError>(dir);
    EXPECT_TRUE(contains(message, "omni_defaults.json")) << message;
    EXPECT_TRUE(contains(message, "width")) << message;
  }
}

TEST_F(OmniUnifiedPipelineTest, CommandLineGenerateWithCpuOffload) {
  const auto out = tiny_wan::temp_dir("cli");
  const auto generate = [&](const std::string& name, bool offload) {
    std::vector<std::string> argv = {OMNI_BINARY,
                                     "generate",
                                     unified_dir().string(),
                                     "--prompt",
                                     "a red circle moving right",
                                     "--seed",
                                     "3",
                                     "--device",
                                     "sim",
                                     "--output",
                                     (out / (name + ".png")).string(),
                                     "--report-json",
                                     (out / (name + ".json")).string()};
    if (offload) argv.push_back("--enable-cpu-offload");
    return omni::testing::run_process(argv);
  };
  const auto with = generate("with", true);
  ASSERT_EQ(with.exit_code, 0) << with.err;
  const auto without = generate("without", false);
  ASSERT_EQ(without.exit_code, 0) << without.err;
  EXPECT_EQ(omni::testing::read_text_file((out / "with.png").string()),
            omni::testing::read_text_file((out / "without.png").string()))
      << "offload changed the picture";

  const auto json =
      nlohmann::json::parse(omni::testing::read_text_file((out / "with.json").string()));
  EXPECT_EQ(json["strategy"], "model-level");
  EXPECT_EQ(json["d2h_bytes"].get<std::uint64_t>(), 0u);
  std::map<std::string, std::string> roles;
  for (const auto& c : json["components"]) {
    roles[c["name"].get<std::string>()] = c["role"].get<std::string>();
    if (c["name"] != "vae") EXPECT_EQ(c["uploads"].get<std::uint64_t>(), 1u) << c.dump();
  }
  EXPECT_EQ(roles, (std::map<std::string, std::string>{
                       {"reasoner", "split"}, {"generator", "split"}, {"vae", "resident"}}));
  std::map<std::string, int> uploads;
  for (const auto& t : json["transfers"]) {
    EXPECT_EQ(t["direction"], "h2d");
    ++uploads[t["component"].get<std::string>()];
  }
  EXPECT_EQ(uploads, (std::map<std::string, int>{{"reasoner", 1}, {"generator", 1}}));
  EXPECT_LT(json["peak_resident_bytes"].get<std::uint64_t>(),
            json["planned_peak_without_offload_bytes"].get<std::uint64_t>());
}

// Note [A split transformer in a directory] (src/engine/inspect.cpp).
TEST_F(OmniUnifiedPipelineTest, InspectPlansReasonerAndGeneratorAsSplitComponents) {
  const auto plan = inspect_model(unified_dir().string());
  const auto* reasoner = plan.component("transformer.reasoner");
  const auto* generator = plan.component("transformer.generator");
  const auto* vae = plan.component("vae");
  ASSERT_NE(reasoner, nullptr);
  ASSERT_NE(generator, nullptr);
  ASSERT_NE(vae, nullptr);
  EXPECT_EQ(plan.component("transformer"), nullptr);
  EXPECT_EQ(reasoner->role, offload::Role::split);
  EXPECT_EQ(generator->role, offload::Role::split);
  // The counts are the loaded modules' own.
  auto pipe = load_unified(unified_dir());
  const auto count = [](torch::nn::Module& m) {
    std::uint64_t n = 0;
    for (const auto& p : m.parameters()) n += static_cast<std::uint64_t>(p.numel());
    return n;
  };
  EXPECT_EQ(reasoner->parameters, count(*pipe->transformer->reasoner));
  EXPECT_EQ(generator->parameters, count(*pipe->transformer->generator));
  EXPECT_EQ(reasoner->config_parameters, reasoner->parameters);
  EXPECT_EQ(generator->config_parameters, generator->parameters);
  EXPECT_EQ(reasoner->note, "");
  EXPECT_EQ(generator->note, "");
  // Only one of them is ever resident, beside the VAE.
  EXPECT_EQ(plan.planned_peak_with_offload_bytes,
            std::max(reasoner->bytes, generator->bytes) + vae->bytes);
  EXPECT_EQ(plan.planned_peak_without_offload_bytes,
            reasoner->bytes + generator->bytes + vae->bytes);

  const auto dir = copy_of_unified("inspect_stray_key");
  const auto file = dir / "transformer" / "diffusion_pytorch_model.safetensors";
  auto tensors = io::load_safetensors(file);
  tensors.emplace_back("stray.weight", torch::zeros({2}));
  io::save_safetensors(file, tensors);
  try {
    inspect_model(dir.string());
    ADD_FAILURE() << "a tensor outside reasoner./generator. was accepted";
  } catch (const FormatError& e) {
    EXPECT_TRUE(contains(e.what(), "'stray.weight'")) << e.what();
  }
}
