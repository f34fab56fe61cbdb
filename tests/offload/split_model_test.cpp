#include "omni/offload/split_model.h"

#include <gtest/gtest.h>

#include "offload/toy_pipeline.h"
#include "omni/error.h"
#include "omni/offload/backend.h"
#include "testing/fault_injection.h"

using namespace omni;
using offload::Residency;
using toy::sim;

namespace {

// A split model like the seed's Cosmos3: a reasoner that runs once and a
// generator that runs every step, sharing a small embedding; plus a VAE.
class UnifiedPipeline : public nn::Module, public offload::SupportsModelCpuOffload {
 public:
  UnifiedPipeline() {
    torch::manual_seed(11);
    embed = register_module("embed", toy::Layer(8, 8, 1));
    reasoner = register_module("reasoner", toy::Layer(8, 8, 3));
    generator = register_module("generator", toy::Layer(8, 8, 4));
    vae = register_module("vae", toy::Layer(8, 4, 1));
    for (auto& p : parameters()) p.set_requires_grad(false);
  }

  void enable_omni_model_cpu_offload(const offload::ModelCpuOffloadOptions& o) override {
    ++enable_calls;
    const std::vector<std::string> known = {"reasoner", "generator"};
    for (const auto& name : o.components)
      OMNI_CHECK(std::find(known.begin(), known.end(), name) != known.end(), ConfigError,
                 "unknown split component '", name, "'; known: reasoner, generator");
    auto selected = [&](const std::string& n) {
      return o.components.empty() ||
             std::find(o.components.begin(), o.components.end(), n) != o.components.end();
    };
    std::vector<offload::NamedModule> exclusive,
        resident = {{"embed", embed.ptr()}, {"vae", vae.ptr()}};
    for (auto& [name, module] : std::vector<offload::NamedModule>{{"reasoner", reasoner.ptr()},
                                                                  {"generator", generator.ptr()}})
      (selected(name) ? exclusive : resident).emplace_back(name, module);
    o.host->register_split_components(exclusive, resident);
    host = o.host;
  }
  void disable_omni_model_cpu_offload() noexcept override { host = nullptr; }

  torch::Tensor run(const torch::Tensor& x, int steps,
                    const std::function<void(const char*)>& probe = {}) {
    torch::Tensor context;
    {
      offload::OffloadContext ctx(host, "reasoner");
      if (probe) probe("reasoner");
      context = reasoner->forward(embed->forward(x));
    }
    auto h = context;
    for (int i = 0; i < steps; ++i) {
      offload::OffloadContext ctx(host, "generator");
      if (probe) probe("generator");
      h = generator->forward(h + context);
    }
    return vae->forward(h);
  }

  toy::Layer embed{nullptr}, reasoner{nullptr}, generator{nullptr}, vae{nullptr};
  offload::SplitOffloadHost* host = nullptr;
  int enable_calls = 0;
};

Residency where(const offload::OffloadBackend& b, const std::string& name) {
  return b.ledger().entries()[*b.ledger().find(name)].where;
}

}  // namespace

TEST(SplitModel, OnlyTheRunningSubComponentIsResident) {
  UnifiedPipeline p;
  UnifiedPipeline reference;
  auto x = torch::randn({2, 8});
  auto expected = reference.run(x, 3);
  auto device = sim();
  offload::ModelLevelOffloadBackend backend(*device);
  backend.enable(p, {});
  EXPECT_EQ(p.enable_calls, 1);
  backend.begin_request();
  int probes = 0;
  auto out = p.run(x, 3, [&](const char* running) {
    ++probes;
    const std::string other = std::string(running) == "reasoner" ? "generator" : "reasoner";
    EXPECT_EQ(where(backend, running), Residency::device);
    EXPECT_EQ(where(backend, other), Residency::host);
    EXPECT_EQ(where(backend, "embed"), Residency::device);
    EXPECT_EQ(where(backend, "vae"), Residency::device);
  });
  EXPECT_EQ(probes, 4);
  EXPECT_TRUE(torch::equal(out, expected)) << "bitwise identical to no offload";
  auto r = backend.end_request();
  EXPECT_EQ(r.component("reasoner")->uploads, 1u);
  EXPECT_EQ(r.component("generator")->uploads, 1u)
      << "re-entering the active context moves nothing";
  EXPECT_EQ(r.d2h_bytes, 0u);
  EXPECT_EQ(r.peak_resident_bytes, r.planned_peak_bytes);
  EXPECT_EQ(r.planned_peak_bytes, r.component("generator")->bytes + r.component("embed")->bytes +
                                      r.component("vae")->bytes);
}

TEST(SplitModel, EnteringTheActiveContextMovesNothing) {
  UnifiedPipeline p;
  auto device = sim();
  offload::ModelLevelOffloadBackend backend(*device);
  backend.enable(p, {});
  { offload::OffloadContext a(p.host, "generator"); }
  backend.begin_request();
  { offload::OffloadContext b(p.host, "generator"); }
  { offload::OffloadContext c(p.host, "generator"); }
  auto r = backend.end_request();
  EXPECT_TRUE(r.transfers.empty());
  EXPECT_EQ(r.component("generator")->uploads, 0u);
}

TEST(SplitModel, UnknownNameListsTheKnownOnes) {
  UnifiedPipeline p;
  auto device = sim();
  offload::ModelLevelOffloadBackend backend(*device);
  backend.enable(p, {});
  try {
    offload::OffloadContext ctx(p.host, "planner");
    FAIL() << "expected an error";
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("unknown component 'planner'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("reasoner"), std::string::npos) << msg;
    EXPECT_NE(msg.find("generator"), std::string::npos) << msg;
  }
  EXPECT_NO_THROW(backend.ledger().verify());
}

TEST(SplitModel, EnableAndDisableAreIdempotentAndLeaveNoContext) {
  UnifiedPipeline p;
  auto x = torch::randn({2, 8});
  UnifiedPipeline reference;
  auto expected = reference.run(x, 2);
  auto device = sim();
  offload::ModelLevelOffloadBackend backend(*device);
  backend.enable(p, {});
  backend.enable(p, {});
  EXPECT_EQ(p.enable_calls, 1);
  p.run(x, 2);
  backend.disable();
  backend.disable();
  EXPECT_EQ(p.host, nullptr) << "no model-local context survives disable";
  for (auto& param : p.parameters()) EXPECT_FALSE(device::is_unusable_placeholder(param));
  EXPECT_TRUE(torch::equal(p.run(x, 2), expected));
}

TEST(SplitModel, ExplicitSelectionIsHonoured) {
  UnifiedPipeline p;
  auto device = sim();
  offload::OffloadOptions options;
  options.split_components = {"generator"};
  offload::ModelLevelOffloadBackend backend(*device, options);
  backend.enable(p, {});
  EXPECT_EQ(where(backend, "reasoner"), Residency::device) << "unselected: stays resident";
  EXPECT_EQ(where(backend, "generator"), Residency::host);
  p.run(torch::randn({1, 8}), 1);
  EXPECT_EQ(where(backend, "reasoner"), Residency::device);
}

TEST(SplitModel, UnknownSelectionIsRejectedBeforeAnySetup) {
  UnifiedPipeline p;
  std::vector<torch::Tensor> before;
  for (auto& param : p.parameters()) before.push_back(param.clone());
  auto device = sim();
  offload::OffloadOptions options;
  options.split_components = {"planner"};
  offload::ModelLevelOffloadBackend backend(*device, options);
  EXPECT_THROW(backend.enable(p, {}), ConfigError);
  EXPECT_FALSE(backend.enabled());
  EXPECT_EQ(p.host, nullptr);
  EXPECT_TRUE(backend.ledger().entries().empty());
  auto params = p.parameters();
  for (std::size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(torch::equal(params[i], before[i]));
}

TEST(SplitModel, FailureDuringSetupRollsBack) {
  UnifiedPipeline p;
  std::vector<torch::Tensor> before;
  for (auto& param : p.parameters()) before.push_back(param.clone());
  device::DeviceOptions options;
  omni::fault::Faults faults;
  faults.fail_allocation_number = 2;  // while uploading the resident modules
  omni::fault::ScopedFaults armed(faults);
  auto device = sim(options);
  offload::ModelLevelOffloadBackend backend(*device);
  EXPECT_THROW(backend.enable(p, {}), DeviceOutOfMemory);
  EXPECT_FALSE(backend.enabled());
  EXPECT_EQ(p.host, nullptr) << "the model was told to disable";
  EXPECT_EQ(device->memory_stats().allocated_bytes, 0u);
  auto params = p.parameters();
  for (std::size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(torch::equal(params[i], before[i]));
}

TEST(SplitModel, LedgerRejectsTwoResidentSplitComponents) {
  offload::ResidencyLedger ledger(true);
  auto a = ledger.add("reasoner", offload::Role::split, 10, true);
  auto b = ledger.add("generator", offload::Role::split, 10, true);
  ledger.transition(a, Residency::device);
  EXPECT_THROW(ledger.transition(b, Residency::device), ResidencyViolation);
}

// A model that registers no split components cannot honour split_components:
// refused before anything moves, naming the option.
TEST(SplitModel, SelectionOnAModelWithoutSplitComponentsIsRejected) {
  toy::ToyPipeline p({"text_encoder"}, {"transformer"});
  std::vector<torch::Tensor> before;
  for (auto& param : p.parameters()) before.push_back(param.clone());
  auto device = toy::sim();
  offload::OffloadOptions options;
  options.split_components = {"transformer"};
  offload::ModelLevelOffloadBackend backend(*device, options);
  try {
    backend.enable(p, toy::spec({"transformer"}, {"text_encoder"}));
    ADD_FAILURE() << "split_components was ignored";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("split_components (transformer)"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(backend.enabled());
  auto params = p.parameters();
  for (std::size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(torch::equal(params[i], before[i]));
}
