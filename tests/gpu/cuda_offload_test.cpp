// Model-level offload on cuda:0 (design.md §2), measured with what only a
// real device has: the caching allocator's statistics, page-locked homes,
// timed uploads. The sim tests in tests/offload check the same rules with a
// stand-in; these check that the real device keeps them.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <iostream>
#include <set>

#include "gpu/cuda_fixture.h"
#include "offload/toy_pipeline.h"
#include "omni/error.h"
#include "omni/offload/backend.h"
#include "omni/omni.h"
#include "omni/pipelines/wan_shaped_example.h"
#include "testing/fault_injection.h"

using namespace omni;
using offload::Residency;

namespace {

GenerationRequest small_request(std::uint64_t seed = 7) {
  GenerationRequest r;
  r.prompt = "a red circle moving right";
  r.negative_prompt = "blurry";
  r.seed = seed;
  r.steps = 4;  // two high-noise steps, two low-noise: both experts run
  r.width = 32;
  r.height = 32;
  r.num_frames = 1;
  return r;
}

EngineArgs cuda_args(bool offload) {
  EngineArgs args;
  args.model = "example:wan-shaped";
  args.enable_cpu_offload = offload;
  args.device = "cuda:0";
  return args;
}

// The Wan-shaped example scaled up (an expert ~56 MiB, the encoder ~18 MiB),
// so that activations and allocator rounding are small beside the weights.
pipelines::WanShapedConfig large_config() {
  pipelines::WanShapedConfig c;
  c.text_dim = 512;
  c.dim = 512;
  return c;
}

// Drives a pipeline through a backend as the engine does.
offload::OffloadReport generate(pipelines::Pipeline& pipeline, offload::OffloadBackend& backend,
                                const GenerationRequest& request) {
  backend.begin_request();
  {
    torch::NoGradGuard no_grad;
    (void)pipeline.run(pipeline.resolve(request), {backend.device().compute_device(), {}});
  }
  return backend.end_request();
}

// Runs a small request once, so that what LibTorch creates on first use of
// these operators (and then keeps) is allocated before a baseline is taken.
void warm_up_pipeline(device::Device& device) {
  auto pipeline = pipelines::make_wan_shaped_example();
  offload::ModelLevelOffloadBackend backend(device);
  backend.enable(*pipeline, pipeline->components());
  (void)generate(*pipeline, backend, small_request());
  device.synchronize();
}

std::uint64_t swappable_bytes(const offload::OffloadReport& r) {
  std::uint64_t n = 0;
  for (const auto& c : r.components)
    if (c.swappable) n += c.bytes;
  return n;
}

std::vector<torch::Tensor> host_copies(torch::nn::Module& m) {
  std::vector<torch::Tensor> out;
  for (auto& p : m.parameters()) out.push_back(p.detach().cpu().clone());
  return out;
}

}  // namespace

using CudaOffload = gpu_test::Cuda;
using CudaStartup = gpu_test::CudaCold;

// B1 of the GPU review: the first thing a process does with CUDA is build an
// engine with offload and no --device-memory-budget (the CLI's and Python's
// path). Working out the budget reads the allocator's statistics, which
// failed with "did you call init?" before any CUDA tensor existed. No
// warm-up here: that is what hid it.
TEST_F(CudaStartup, AnEngineStartsWithoutABudgetInAFreshProcess) {
  for (bool offload : {true, false}) {
    Omni omni(cuda_args(offload));
    auto out = omni.generate(small_request());
    EXPECT_EQ(out.frames.size(0), 1) << "offload " << offload;
    EXPECT_GT(out.report.device_peak_allocated_bytes, 0u) << "offload " << offload;
  }
}

TEST_F(CudaOffload, SameSeedSameFramesWithAndWithoutOffloadAndAcrossRequests) {
  Omni with(cuda_args(true));
  Omni without(cuda_args(false));
  ASSERT_EQ(with.backend()->strategy(), "model-level");
  ASSERT_EQ(without.backend()->strategy(), "all-resident");
  auto a = with.generate(small_request(11));
  auto b = with.generate(small_request(11));
  auto c = without.generate(small_request(11));
  ASSERT_EQ(a.frames.sizes(), c.frames.sizes());
  EXPECT_TRUE(torch::equal(a.frames, b.frames)) << "the second request, after a full swap cycle";
  EXPECT_TRUE(torch::equal(a.frames, c.frames)) << "offload changed the output";
  EXPECT_GT(a.frames.max().item<int>(), a.frames.min().item<int>()) << "a constant picture";
  auto d = with.generate(small_request(12));
  EXPECT_FALSE(torch::equal(a.frames, d.frames)) << "another seed must change the output";
}

TEST_F(CudaOffload, ToyOutputIsBitwiseIdenticalInFloat) {
  auto run = [&](bool offload) {
    toy::ToyPipeline p({"text_encoder"}, {"transformer", "transformer_2"});
    std::unique_ptr<offload::OffloadBackend> backend;
    if (offload)
      backend = std::make_unique<offload::ModelLevelOffloadBackend>(*device_);
    else
      backend = std::make_unique<offload::AllResidentBackend>(*device_);
    backend->enable(p, toy::spec({"transformer", "transformer_2"}, {"text_encoder"}));
    torch::NoGradGuard no_grad;
    const auto input = torch::randn({16, 8}, at::detail::createCPUGenerator(5));
    auto first = p.run(input.to(device_->compute_device()), 3).cpu();
    auto second = p.run(input.to(device_->compute_device()), 3).cpu();
    EXPECT_TRUE(torch::equal(first, second));
    backend->disable();
    return first;
  };
  EXPECT_TRUE(torch::equal(run(true), run(false)));
}

TEST_F(CudaOffload, NothingComesBackAndHomesArePinned) {
  Omni omni(cuda_args(true));
  auto result = omni.generate(small_request());
  const auto& r = result.report;
  EXPECT_EQ(r.device, "cuda:0");
  EXPECT_FALSE(r.stand_in);
  EXPECT_EQ(r.d2h_bytes, 0u);
  ASSERT_EQ(r.transfers.size(), 3u) << "encoder, expert, expert";
  for (const auto& t : r.transfers) {
    EXPECT_EQ(t.direction, offload::Direction::h2d) << t.component;
    EXPECT_TRUE(t.pinned) << t.component << " was uploaded from pageable memory";
    EXPECT_GT(t.gbps(), 0.0) << t.component;
    EXPECT_LT(t.gbps(), 1000.0) << t.component << ": not a plausible link speed";
  }
  for (const char* name : {"text_encoder", "transformer", "transformer_2"})
    EXPECT_GT(r.component(name)->gbps(), 0.0) << name;

  // One pinned home per swappable tensor (each slot 256-byte aligned), nothing pageable.
  const auto swappable = swappable_bytes(r);
  std::uint64_t tensors = 0;
  for (const char* name : {"text_encoder", "transformer", "transformer_2"})
    tensors += offload::unique_tensors(*offload::find_module(omni.pipeline(), name)).size();
  EXPECT_GE(r.pinned_host_bytes, swappable);
  EXPECT_LE(r.pinned_host_bytes, swappable + 256 * tensors);
  EXPECT_EQ(r.pageable_host_bytes, 0u);

  // Offloaded parameters point at their homes: host memory the driver has page-locked.
  EXPECT_EQ(r.component("transformer_2")->where, Residency::device);
  for (const char* name : {"text_encoder", "transformer"}) {
    EXPECT_EQ(r.component(name)->where, Residency::host) << name;
    for (const auto& p : offload::find_module(omni.pipeline(), name)->parameters()) {
      EXPECT_TRUE(p.device().is_cpu()) << name;
      EXPECT_TRUE(p.is_pinned()) << name << ": an offloaded parameter is not in pinned memory";
    }
  }
  for (const auto& p : offload::find_module(omni.pipeline(), "transformer_2")->parameters())
    EXPECT_TRUE(p.device().is_cuda());
}

TEST_F(CudaOffload, PageableFallbackGivesTheSameFrames) {
  auto args = cuda_args(true);
  omni::fault::Faults faults;
  faults.pin_budget_bytes = 0;  // the host refuses every pin
  omni::fault::ScopedFaults armed(faults);
  Omni pageable(args);
  Omni pinned(cuda_args(true));
  auto a = pageable.generate(small_request());
  auto b = pinned.generate(small_request());
  EXPECT_EQ(a.report.pinned_host_bytes, 0u);
  EXPECT_EQ(a.report.pageable_host_bytes, b.report.pinned_host_bytes);
  for (const auto& t : a.report.transfers) EXPECT_FALSE(t.pinned) << t.component;
  EXPECT_TRUE(torch::equal(a.frames, b.frames));
}

// M1 of the GPU review, restated with the rolling swap (Note [Components in
// flight]): the two experts are both wholly on the device at no point of
// the ledger's log (one may arrive block by block, `partial`, while the
// other leaves), and the allocator itself never held both experts' weights:
// its peak, less what LibTorch keeps for itself, stays below their sum and
// within the seed's bound plus the activations (Note [The seed's bound by
// default]).
TEST_F(CudaOffload, TwoExpertsNeverCoReside) {
  warm_up_pipeline(*device_);
  const auto baseline = allocated();
  auto pipeline = pipelines::make_wan_shaped_example(large_config());
  offload::ModelLevelOffloadBackend backend(*device_);
  backend.enable(*pipeline, pipeline->components());
  const auto& ledger = backend.ledger();
  const auto bound = backend.planned_peak_bytes() + 2 * backend.largest_group_bytes();
  for (std::uint64_t seed : {1, 2}) {
    const auto report = generate(*pipeline, backend, small_request(seed));
    const auto experts =
        report.component("transformer")->bytes + report.component("transformer_2")->bytes;
    const auto peak = report.device_peak_allocated_bytes - baseline;
    EXPECT_LT(peak, experts) << "the allocator held both experts' weights";
    EXPECT_LE(report.peak_resident_bytes, bound);
    std::cout << "[ peak     ] request " << seed << ": allocator " << device::format_bytes(peak)
              << ", ledger " << device::format_bytes(report.peak_resident_bytes) << ", bound "
              << device::format_bytes(bound) << ", both experts " << device::format_bytes(experts)
              << "\n";
  }
  std::set<std::string> whole;
  int expert_arrivals = 0;
  for (const auto& event : ledger.log()) {
    if (event.to == Residency::device) {
      whole.insert(event.component);
      if (event.component.starts_with("transformer")) ++expert_arrivals;
    } else {
      whole.erase(event.component);
    }
    EXPECT_FALSE(whole.count("transformer") && whole.count("transformer_2"))
        << "both experts wholly resident after " << event.component << " → "
        << offload::to_string(event.to);
  }
  EXPECT_EQ(expert_arrivals, 4) << "each expert once per request";
}

TEST_F(CudaOffload, DevicePeakFollowsThePlanNotTheSum) {
  const auto config = large_config();
  warm_up_pipeline(*device_);
  const auto baseline = allocated();
  std::uint64_t with_peak = 0, without_peak = 0;
  offload::OffloadReport with_report;
  {
    auto pipeline = pipelines::make_wan_shaped_example(config);
    offload::ModelLevelOffloadBackend backend(*device_);
    backend.enable(*pipeline, pipeline->components());
    with_report = generate(*pipeline, backend, small_request());
    with_peak = with_report.device_peak_allocated_bytes - baseline;
  }
  EXPECT_EQ(allocated(), baseline);
  offload::OffloadReport without_report;
  {
    auto pipeline = pipelines::make_wan_shaped_example(config);
    offload::AllResidentBackend backend(*device_);
    backend.enable(*pipeline, pipeline->components());
    without_report = generate(*pipeline, backend, small_request());
    without_peak = without_report.device_peak_allocated_bytes - baseline;
  }
  const auto planned = with_report.planned_peak_bytes;
  const auto sum = with_report.planned_peak_without_offload_bytes;
  std::cout << "[ peak     ] allocator peak with offload " << device::format_bytes(with_peak)
            << " (planned " << device::format_bytes(planned) << "), without "
            << device::format_bytes(without_peak) << " (planned " << device::format_bytes(sum)
            << ")\n";
  ASSERT_LT(planned * 3, sum * 2) << "the test needs a plan well below the sum";
  EXPECT_GE(with_peak, planned);
  EXPECT_LT(with_peak, planned + (sum - planned) / 4) << "close to the plan, far from the sum";
  EXPECT_GE(without_peak, sum);
  EXPECT_EQ(without_report.planned_peak_without_offload_bytes, sum);
  const auto* t1 = with_report.component("transformer");
  const auto* t2 = with_report.component("transformer_2");
  EXPECT_LT(with_peak, t1->bytes + t2->bytes) << "the experts' weights were on the device together";
}

TEST_F(CudaOffload, DisableKeepsOnlyTheResidentComponentsThenReleaseFreesAll) {
  warm_up_pipeline(*device_);
  const auto baseline = allocated();
  auto pipeline = pipelines::make_wan_shaped_example(large_config());
  auto backend = std::make_unique<offload::ModelLevelOffloadBackend>(*device_);
  backend->enable(*pipeline, pipeline->components());
  auto report = generate(*pipeline, *backend, small_request());
  backend->disable();
  backend->disable();  // idempotent
  // disable() documents it: what is on the device stays there (the last
  // expert and the VAE), the rest points at the host homes.
  const auto resident = backend->ledger().resident_bytes();
  EXPECT_EQ(resident, report.component("transformer_2")->bytes + report.component("vae")->bytes);
  const auto held = allocated() - baseline;
  EXPECT_GE(held, resident);
  EXPECT_LT(held, resident + (1u << 20)) << "more device memory held than the resident weights";
  backend.reset();
  pipeline.reset();
  EXPECT_EQ(allocated(), baseline) << "device memory outlived the pipeline and the backend";
}

TEST_F(CudaOffload, FailedEnableLeavesNothingOnTheDevice) {
  const auto baseline = allocated();
  device::DeviceOptions options;
  omni::fault::Faults faults;
  faults.fail_allocation_number = 3;  // after the VAE's first groups went up
  omni::fault::ScopedFaults armed(faults);
  auto faulty = device::make_device(device::DeviceSpec::parse("cuda:0"), true, options);
  auto pipeline = pipelines::make_wan_shaped_example();
  const auto before = host_copies(*pipeline);
  offload::ModelLevelOffloadBackend backend(*faulty);
  EXPECT_THROW(backend.enable(*pipeline, pipeline->components()), DeviceOutOfMemory);
  EXPECT_FALSE(backend.enabled());
  EXPECT_EQ(allocated(), baseline) << "a rolled-back enable() left device memory behind";
  const auto params = pipeline->parameters();
  ASSERT_EQ(params.size(), before.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(params[i].device().is_cpu());
    EXPECT_TRUE(torch::equal(params[i], before[i]));
  }
  // The same pipeline enables and runs on a healthy device afterwards.
  offload::ModelLevelOffloadBackend healthy(*device_);
  healthy.enable(*pipeline, pipeline->components());
  EXPECT_NO_THROW((void)generate(*pipeline, healthy, small_request()));
}
