#include "omni/offload/backend.h"

#include <gtest/gtest.h>

#include <set>

#include "offload/toy_pipeline.h"
#include "omni/error.h"
#include "omni/omni.h"
#include "testing/fault_injection.h"

using namespace omni;
using offload::Residency;
using offload::ResidencyEvent;
using toy::sim;

namespace {

std::vector<torch::Tensor> snapshot(torch::nn::Module& m) {
  std::vector<torch::Tensor> out;
  for (auto& p : m.parameters()) out.push_back(p.detach().clone());
  return out;
}

bool same(torch::nn::Module& m, const std::vector<torch::Tensor>& values) {
  auto params = m.parameters();
  if (params.size() != values.size()) return false;
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (device::is_unusable_placeholder(params[i])) return false;
    if (!torch::equal(params[i], values[i])) return false;
  }
  return true;
}

std::size_t hook_count(toy::ToyPipeline& p) {
  std::size_t n = 0;
  for (auto& m : p.modules(/*include_self=*/false))
    if (auto h = std::dynamic_pointer_cast<nn::Module>(m)) n += h->num_forward_pre_hooks();
  return n;
}

// `streaming` off: the seed's strict whole-component swaps.
EngineArgs example_args(bool offload, bool streaming = true) {
  EngineArgs args;
  args.model = "example:wan-shaped";
  args.enable_cpu_offload = offload;
  args.device = "sim";
  args.offload.quiet = true;
  args.offload.streaming = streaming;
  // Every request runs its encoder: the residency sequences below are the
  // offload contract's, not the prompt cache's (Note [Prompt cache]).
  args.prompt_cache_bytes = 0;
  return args;
}

GenerationRequest request(std::uint64_t seed = 3) {
  GenerationRequest r;
  r.prompt = "a red circle moving right";
  r.negative_prompt = "blurry";
  r.seed = seed;
  r.steps = 6;
  r.width = 32;
  r.height = 32;
  r.num_frames = 5;
  return r;
}

}  // namespace

TEST(ModelLevelOffload, WanShapedResidencySequenceOverTwoRequests) {
  Omni omni(example_args(true, /*streaming=*/false));
  auto* backend = omni.backend();
  ASSERT_NE(backend, nullptr);
  EXPECT_EQ(backend->strategy(), "model-level");
  // At enable only the VAE went up.
  EXPECT_EQ(backend->ledger().log(), (std::vector<ResidencyEvent>{{"vae", Residency::device}}));
  const_cast<offload::ResidencyLedger&>(backend->ledger()).clear_log();
  auto first = omni.generate(request());
  auto second = omni.generate(request());
  const std::vector<ResidencyEvent> expected = {
      {"text_encoder", Residency::device},  // request 1
      {"text_encoder", Residency::host},    {"transformer", Residency::device},
      {"transformer", Residency::host},     {"transformer_2", Residency::device},
      {"transformer_2", Residency::host},  // request 2: the encoder evicts the last expert
      {"text_encoder", Residency::device},  {"text_encoder", Residency::host},
      {"transformer", Residency::device},   {"transformer", Residency::host},
      {"transformer_2", Residency::device},
  };
  EXPECT_EQ(backend->ledger().log(), expected);
  for (const auto* r : {&first.report, &second.report}) {
    EXPECT_EQ(r->d2h_bytes, 0u);
    for (const auto& t : r->transfers) EXPECT_EQ(t.direction, offload::Direction::h2d);
    EXPECT_EQ(r->component("transformer")->uploads, 1u);
    EXPECT_EQ(r->component("transformer_2")->uploads, 1u);
    EXPECT_EQ(r->component("text_encoder")->uploads, 1u);
    EXPECT_EQ(r->component("vae")->uploads, 0u) << "the VAE is never swapped";
    const auto enc = r->component("text_encoder")->bytes;
    const auto dit =
        std::max(r->component("transformer")->bytes, r->component("transformer_2")->bytes);
    const auto vae = r->component("vae")->bytes;
    EXPECT_EQ(r->peak_resident_bytes, std::max(enc, dit) + vae);
    EXPECT_EQ(r->planned_peak_bytes, r->peak_resident_bytes);
    EXPECT_LT(r->peak_resident_bytes, r->planned_peak_without_offload_bytes);
    // The device's own figure (weights plus alignment padding) never held
    // every component at once.
    EXPECT_LT(r->device_peak_allocated_bytes, r->planned_peak_without_offload_bytes);
    EXPECT_TRUE(r->stand_in);
  }
  EXPECT_GT(first.report.pinned_host_bytes, 0u);
  EXPECT_EQ(first.report.pageable_host_bytes, 0u);
  EXPECT_TRUE(torch::equal(first.frames, second.frames));
}

TEST(ModelLevelOffload, SameSeedBitwiseIdenticalWithAndWithoutOffload) {
  Omni with(example_args(true));
  Omni without(example_args(false));
  EXPECT_EQ(without.backend()->strategy(), "all-resident");
  auto a = with.generate(request(11));
  auto b = without.generate(request(11));
  ASSERT_EQ(a.frames.sizes(), b.frames.sizes());
  EXPECT_TRUE(torch::equal(a.frames, b.frames));
  EXPECT_EQ(b.report.peak_resident_bytes, b.report.planned_peak_without_offload_bytes);
  auto c = with.generate(request(12));
  EXPECT_FALSE(torch::equal(a.frames, c.frames)) << "another seed must change the output";
}

TEST(ModelLevelOffload, DitHookOffloadsTheOtherDit) {
  toy::ToyPipeline p({"text_encoder"}, {"transformer", "transformer_2"});
  auto device = sim();
  offload::ModelLevelOffloadBackend backend(*device);
  backend.enable(p, toy::spec({"transformer", "transformer_2"}, {"text_encoder"}));
  auto x = torch::randn({2, 8});
  p.dits.at("transformer")(x);
  const auto& ledger = backend.ledger();
  EXPECT_EQ(ledger.entries()[*ledger.find("transformer")].where, Residency::device);
  p.dits.at("transformer_2")(x);
  EXPECT_EQ(ledger.entries()[*ledger.find("transformer")].where, Residency::host);
  EXPECT_EQ(ledger.entries()[*ledger.find("transformer_2")].where, Residency::device);
  // The offloaded expert's weights are unusable placeholders on sim.
  EXPECT_TRUE(device::is_unusable_placeholder(p.dits.at("transformer")->linears[0]->weight));
}

TEST(ModelLevelOffload, SeveralEncodersCoReside) {
  toy::ToyPipeline p({"text_encoder", "text_encoder_2"}, {"transformer"});
  auto device = sim();
  offload::ModelLevelOffloadBackend backend(*device);
  backend.enable(p, toy::spec({"transformer"}, {"text_encoder", "text_encoder_2"}));
  auto x = torch::randn({2, 8});
  p.encoders.at("text_encoder")(x);
  p.encoders.at("text_encoder_2")(x);
  const auto& ledger = backend.ledger();
  EXPECT_EQ(ledger.entries()[*ledger.find("text_encoder")].where, Residency::device);
  EXPECT_EQ(ledger.entries()[*ledger.find("text_encoder_2")].where, Residency::device);
  p.dits.at("transformer")(x);
  EXPECT_EQ(ledger.entries()[*ledger.find("text_encoder")].where, Residency::host);
  EXPECT_EQ(ledger.entries()[*ledger.find("text_encoder_2")].where, Residency::host);
}

TEST(ModelLevelOffload, ParameterlessModuleCausesNoTransfer) {
  toy::ToyPipeline p({"text_encoder"}, {"transformer"}, /*with_identity=*/true);
  auto device = sim();
  offload::ModelLevelOffloadBackend backend(*device);
  backend.enable(p, toy::spec({"transformer"}, {"text_encoder", "identity"}));
  backend.begin_request();
  p.run(torch::randn({2, 8}));
  auto r = backend.end_request();
  for (const auto& t : r.transfers) EXPECT_NE(t.component, "identity");
  EXPECT_EQ(r.component("identity")->bytes, 0u);
  EXPECT_EQ(r.component("identity")->upload_bytes, 0u);
}

TEST(ModelLevelOffload, OutputMatchesNoOffloadOnToy) {
  toy::ToyPipeline a({"text_encoder"}, {"transformer", "transformer_2"});
  toy::ToyPipeline b({"text_encoder"}, {"transformer", "transformer_2"});
  auto x = torch::randn({3, 8});
  auto reference = b.run(x);
  auto device = sim();
  offload::ModelLevelOffloadBackend backend(*device);
  backend.enable(a, toy::spec({"transformer", "transformer_2"}, {"text_encoder"}));
  EXPECT_TRUE(torch::equal(a.run(x), reference));
  EXPECT_TRUE(torch::equal(a.run(x), reference));
}

TEST(ModelLevelOffload, PinningRefusedFallsBackToPageableWithSameOutput) {
  toy::ToyPipeline a({"text_encoder"}, {"transformer", "transformer_2"});
  toy::ToyPipeline b({"text_encoder"}, {"transformer", "transformer_2"});
  auto x = torch::randn({3, 8});
  auto reference = b.run(x);
  device::DeviceOptions options;
  omni::fault::Faults faults;
  faults.pin_budget_bytes = 4096;  // one chunk, then refusal
  omni::fault::ScopedFaults armed(faults);
  auto device = sim(options);
  offload::OffloadOptions oo;
  oo.max_pin_chunk_bytes = 4096;
  offload::ModelLevelOffloadBackend backend(*device, oo);
  testing::internal::CaptureStderr();
  backend.enable(a, toy::spec({"transformer", "transformer_2"}, {"text_encoder"}));
  const auto warnings = testing::internal::GetCapturedStderr();
  EXPECT_NE(warnings.find("refused to pin"), std::string::npos) << warnings;
  EXPECT_EQ(warnings.find("refused to pin"), warnings.rfind("refused to pin")) << "warn once";
  backend.begin_request();
  EXPECT_TRUE(torch::equal(a.run(x), reference));
  auto r = backend.end_request();
  EXPECT_GT(r.pinned_host_bytes, 0u);
  EXPECT_GT(r.pageable_host_bytes, 0u);
  bool saw_pageable = false;
  for (const auto& t : r.transfers) saw_pageable = saw_pageable || !t.pinned;
  EXPECT_TRUE(saw_pageable);
}

TEST(ModelLevelOffload, PinningRefusedPartWayOnWanShapedKeepsTheOutput) {
  EngineArgs args = example_args(true);
  args.offload.max_pin_chunk_bytes = 64 << 10;
  omni::fault::Faults faults;
  faults.pin_budget_bytes = 1 << 20;  // some homes pinned, the rest refused
  omni::fault::ScopedFaults armed(faults);
  testing::internal::CaptureStderr();
  Omni omni(args);
  (void)testing::internal::GetCapturedStderr();
  auto a = omni.generate(request(5));
  auto b = omni.generate(request(5));
  Omni reference(example_args(false));
  const auto expected = reference.generate(request(5)).frames;
  EXPECT_TRUE(torch::equal(a.frames, expected));
  EXPECT_TRUE(torch::equal(b.frames, expected));
  EXPECT_GT(a.report.pinned_host_bytes, 0u);
  EXPECT_GT(a.report.pageable_host_bytes, 0u);
  EXPECT_LE(a.report.pinned_host_bytes, 1u << 20);
  EXPECT_NO_THROW(omni.backend()->ledger().verify());
}

TEST(ModelLevelOffload, UploadFailingHalfWayRollsEnableBack) {
  toy::ToyPipeline p({"text_encoder"}, {"transformer"});
  auto before = snapshot(p);
  device::DeviceOptions options;
  omni::fault::Faults faults;
  faults.fail_allocation_number = 1;  // the VAE upload at enable
  omni::fault::ScopedFaults armed(faults);
  auto device = sim(options);
  offload::ModelLevelOffloadBackend backend(*device);
  EXPECT_THROW(backend.enable(p, toy::spec({"transformer"}, {"text_encoder"})), DeviceOutOfMemory);
  EXPECT_FALSE(backend.enabled());
  EXPECT_TRUE(same(p, before)) << "every tensor back where it was";
  EXPECT_EQ(hook_count(p), 0u);
  EXPECT_EQ(device->memory_stats().allocated_bytes, 0u);
  EXPECT_NO_THROW(p.run(torch::randn({1, 8})));
  // The fault fired once: enabling again works.
  backend.enable(p, toy::spec({"transformer"}, {"text_encoder"}));
  EXPECT_TRUE(backend.enabled());
}

// Host memory never holds the weights twice: each original is released as
// soon as its home holds the data, not at the end of enable().
TEST(ModelLevelOffload, EnableLeavesNoOriginalTensorAlive) {
  toy::ToyPipeline p({"text_encoder"}, {"transformer", "transformer_2"});
  std::vector<c10::weak_intrusive_ptr<c10::StorageImpl>> originals;
  std::vector<torch::nn::Module*> components = {p.encoders.at("text_encoder").get(),
                                                p.dits.at("transformer").get(),
                                                p.dits.at("transformer_2").get(), p.vae.get()};
  for (auto* m : components)
    for (auto& t : m->parameters()) originals.push_back(t.storage().getWeakStorageImpl());
  ASSERT_EQ(originals.size(), 2u * 2 + 2 * (3u * 2) + 1u * 2);  // weight + bias per Linear
  auto device = sim();
  offload::ModelLevelOffloadBackend backend(*device);
  backend.enable(p, toy::spec({"transformer", "transformer_2"}, {"text_encoder"}));
  for (const auto& w : originals) EXPECT_TRUE(w.expired()) << "an original storage is still alive";
}

// After a failed enable every tensor owns its values again: nothing aliases
// the homes of the abandoned backend, so changing one changes nothing else.
TEST(ModelLevelOffload, RollbackLeavesPrivateCopiesWhereTheTensorsWere) {
  toy::ToyPipeline p({"text_encoder"}, {"transformer"});
  auto before = snapshot(p);
  device::DeviceOptions options;
  omni::fault::Faults faults;
  faults.fail_allocation_number = 1;
  omni::fault::ScopedFaults armed(faults);
  auto device = sim(options);
  {
    offload::ModelLevelOffloadBackend backend(*device);
    EXPECT_THROW(backend.enable(p, toy::spec({"transformer"}, {"text_encoder"})),
                 DeviceOutOfMemory);
  }  // the backend (and whatever it still owned) is gone
  EXPECT_TRUE(same(p, before));
  std::set<const void*> storages;
  for (auto& t : p.parameters()) {
    EXPECT_TRUE(t.device().is_cpu());
    EXPECT_TRUE(storages.insert(t.storage().data()).second) << "two tensors share storage";
  }
  torch::NoGradGuard no_grad;
  p.parameters()[0].add_(1.0);
  EXPECT_TRUE(torch::equal(p.parameters()[1], before[1]));
}

TEST(ModelLevelOffload, HookInstallFailureRollsEnableBack) {
  toy::ToyPipeline p({"text_encoder"}, {"transformer", "transformer_2"});
  auto before = snapshot(p);
  auto device = sim();
  offload::OffloadOptions oo;
  omni::fault::Faults faults;
  faults.fail_hook_install_number = 2;
  omni::fault::ScopedFaults armed(faults);
  offload::ModelLevelOffloadBackend backend(*device, oo);
  EXPECT_THROW(backend.enable(p, toy::spec({"transformer", "transformer_2"}, {"text_encoder"})),
               InternalError);
  EXPECT_FALSE(backend.enabled());
  EXPECT_EQ(hook_count(p), 0u);
  EXPECT_TRUE(same(p, before));
  EXPECT_EQ(device->memory_stats().allocated_bytes, 0u) << "the uploaded VAE was released";
}

TEST(ModelLevelOffload, SimCapacityExceededIsTypedAndRecoverable) {
  EngineArgs args = example_args(true);
  Omni reference(example_args(false));
  {
    omni::fault::Faults faults;
    faults.fail_allocation_number = 8;        // somewhere inside the first expert's upload
    omni::fault::ScopedFaults armed(faults);  // for every device made or allocating meanwhile
    Omni omni(args);
    EXPECT_THROW(omni.generate(request()), DeviceOutOfMemory);
    const auto& ledger = omni.backend()->ledger();
    EXPECT_NO_THROW(ledger.verify());
    EXPECT_EQ(ledger.entries()[*ledger.find("transformer")].where, Residency::host)
        << "a failed upload leaves the component on the host";
    auto ok = omni.generate(request());
    EXPECT_TRUE(torch::equal(ok.frames, reference.generate(request()).frames));
  }

  EngineArgs tiny = example_args(true);
  tiny.sim_memory_bytes = 1 << 20;  // smaller than one expert
  Omni small(tiny);
  try {
    small.generate(request());
    FAIL() << "expected out of memory";
  } catch (const DeviceOutOfMemory& e) {
    EXPECT_NE(std::string(e.what()).find("out of device memory"), std::string::npos);
  }
}

// The pre-hook has uploaded the expert when its forward throws; the
// ledger, the hooks and the device memory must still agree with what a
// successful call leaves, and the next request must run as if nothing happened.
TEST(ModelLevelOffload, ExceptionInsideForwardLeavesHooksAndResidencyConsistent) {
  toy::ToyPipeline a({"text_encoder"}, {"transformer", "transformer_2"});
  toy::ToyPipeline b({"text_encoder"}, {"transformer", "transformer_2"});
  auto x = torch::randn({3, 8});
  auto reference = b.run(x);
  // What a clean request leaves on a device of its own.
  auto clean_device = sim();
  offload::ModelLevelOffloadBackend clean(*clean_device);
  clean.enable(b, toy::spec({"transformer", "transformer_2"}, {"text_encoder"}));
  b.run(x);
  const auto clean_allocated = clean_device->memory_stats().allocated_bytes;

  auto device = sim();
  offload::ModelLevelOffloadBackend backend(*device);
  backend.enable(a, toy::spec({"transformer", "transformer_2"}, {"text_encoder"}));
  const auto hooks = hook_count(a);
  const auto& ledger = backend.ledger();

  backend.begin_request();
  a.encoders.at("text_encoder")(x);
  // Wrong width: the expert's Linear throws inside forward, after its hook ran.
  EXPECT_THROW(a.dits.at("transformer")(torch::randn({3, 5})), c10::Error);
  EXPECT_NO_THROW(ledger.verify());
  EXPECT_EQ(ledger.entries()[*ledger.find("transformer")].where, Residency::device);
  EXPECT_EQ(ledger.entries()[*ledger.find("text_encoder")].where, Residency::host);
  EXPECT_EQ(ledger.entries()[*ledger.find("transformer_2")].where, Residency::host);
  EXPECT_EQ(hook_count(a), hooks) << "no hook lost or added by the exception";
  const auto after_throw = device->memory_stats().allocated_bytes;
  const auto resident_after_throw = ledger.resident_bytes();
  a.dits.at("transformer")(x);  // already resident: moves nothing
  EXPECT_EQ(device->memory_stats().allocated_bytes, after_throw)
      << "the failed call left the device as a successful one does";
  EXPECT_EQ(ledger.resident_bytes(), resident_after_throw);
  (void)backend.end_request();

  backend.begin_request();
  EXPECT_TRUE(torch::equal(a.run(x), reference)) << "the next request is unaffected";
  const auto r = backend.end_request();
  EXPECT_NO_THROW(ledger.verify());
  for (const char* name : {"text_encoder", "transformer", "transformer_2"})
    EXPECT_EQ(r.component(name)->uploads, 1u) << name;
  EXPECT_EQ(device->memory_stats().allocated_bytes, clean_allocated)
      << "no device memory kept from the failed request";
  backend.disable();
  EXPECT_EQ(hook_count(a), 0u);
  EXPECT_TRUE(torch::equal(a.run(x), reference));
}

TEST(ModelLevelOffload, ComputationOnOffloadedWeightFailsLoudly) {
  toy::ToyPipeline p({"text_encoder"}, {"transformer"});
  auto device = sim();
  offload::ModelLevelOffloadBackend backend(*device);
  backend.enable(p, toy::spec({"transformer"}, {"text_encoder"}));
  // forward() bypasses the hook, so the weights are still offloaded.
  EXPECT_THROW(p.dits.at("transformer")->forward(torch::randn({1, 8})), c10::Error);
  EXPECT_NO_THROW(p.dits.at("transformer")(torch::randn({1, 8})));
}

TEST(ModelLevelOffload, EnableAndDisableAreIdempotent) {
  toy::ToyPipeline p({"text_encoder"}, {"transformer"});
  auto x = torch::randn({2, 8});
  auto reference = p.run(x);
  auto device = sim();
  offload::ModelLevelOffloadBackend backend(*device);
  auto s = toy::spec({"transformer"}, {"text_encoder"});
  backend.enable(p, s);
  const auto hooks = hook_count(p);
  backend.enable(p, s);
  EXPECT_EQ(hook_count(p), hooks);
  toy::ToyPipeline other({"text_encoder"}, {"transformer"});
  EXPECT_THROW(backend.enable(other, s), ConfigError);
  p.run(x);
  backend.disable();
  backend.disable();
  EXPECT_EQ(hook_count(p), 0u);
  for (auto& param : p.parameters()) EXPECT_FALSE(device::is_unusable_placeholder(param));
  EXPECT_TRUE(torch::equal(p.run(x), reference)) << "after disable every weight is usable";
}

TEST(ResidencyLedger, RejectsTransitionsThatBreakTheInvariant) {
  offload::ResidencyLedger ledger(true);
  auto dit = ledger.add("transformer", offload::Role::dit, 100, true);
  auto dit2 = ledger.add("transformer_2", offload::Role::dit, 100, true);
  auto enc = ledger.add("text_encoder", offload::Role::encoder, 50, true);
  auto vae = ledger.add("vae", offload::Role::vae, 5, false);
  ledger.transition(vae, Residency::device);
  ledger.transition(enc, Residency::device);
  EXPECT_THROW(ledger.transition(dit, Residency::device), ResidencyViolation);
  EXPECT_EQ(ledger.entries()[dit].where, Residency::host) << "unchanged after a refusal";
  ledger.transition(enc, Residency::host);
  ledger.transition(dit, Residency::device);
  EXPECT_THROW(ledger.transition(dit2, Residency::device), ResidencyViolation);
  EXPECT_THROW(ledger.transition(enc, Residency::device), ResidencyViolation);
  EXPECT_THROW(ledger.transition(vae, Residency::host), ResidencyViolation);
  EXPECT_EQ(ledger.resident_bytes(), 105u);
  EXPECT_EQ(ledger.peak_bytes(), 105u);
}

TEST(OffloadReport, JsonHasTheContractFields) {
  Omni omni(example_args(true));
  auto r = omni.generate(request());
  auto j = r.report.to_json();
  for (const char* key :
       {"device", "peak_resident_bytes", "planned_peak_without_offload_bytes", "pinned_host_bytes",
        "pageable_host_bytes", "d2h_bytes", "components", "transfers"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["device"], "sim");
  ASSERT_EQ(j["components"].size(), 4u);
  for (const auto& c : j["components"])
    for (const char* key : {"name", "role", "bytes", "uploads"})
      EXPECT_TRUE(c.contains(key)) << key;
  ASSERT_EQ(j["transfers"].size(), 3u);
  EXPECT_EQ(j["transfers"][0]["component"], "text_encoder");
  EXPECT_EQ(j["transfers"][0]["direction"], "h2d");
  EXPECT_GT(j["transfers"][0]["bytes"].get<std::uint64_t>(), 0u);
  const auto table = r.report.to_table();
  EXPECT_NE(table.find("transformer_2"), std::string::npos);
  EXPECT_NE(table.find("simulated"), std::string::npos);
}

TEST(CpuDevice, OffloadIsANoOpWithOneNotice) {
  EngineArgs args = example_args(true);
  args.device = "cpu";
  args.offload.quiet = false;
  testing::internal::CaptureStderr();
  Omni omni(args);
  const auto err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("offload is a no-op"), std::string::npos) << err;
  auto r = omni.generate(request());
  EXPECT_EQ(r.report.strategy, "none");
  EXPECT_TRUE(r.report.transfers.empty());
  Omni sim_engine(example_args(true));
  EXPECT_TRUE(torch::equal(r.frames, sim_engine.generate(request()).frames));
}
