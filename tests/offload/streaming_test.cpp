// Streaming model-level offload (Note [Streaming model-level offload]) and
// the mover's contracts: frames bitwise the same as without offload, the
// expert swap rolling block by block within planned + 2 groups, prefetch when
// the device holds both, the ledger's bounded log, and the configuration and
// nesting errors the backend raises.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>

#include "offload/toy_pipeline.h"
#include "omni/cancel_point.h"
#include "omni/error.h"
#include "omni/offload/backend.h"
#include "omni/omni.h"
#include "testing/fault_injection.h"

using namespace omni;
using offload::Residency;
using offload::ResidencyEvent;

namespace {

EngineArgs streamed_args(std::uint64_t sim_memory = 64ull << 30, double link_gbps = 0) {
  EngineArgs args;
  args.model = "example:wan-shaped";
  args.enable_cpu_offload = true;
  args.device = "sim";
  args.sim_memory_bytes = sim_memory;
  args.sim_link_gbps = link_gbps;
  args.offload.quiet = true;
  return args;
}

GenerationRequest streamed_request() {
  GenerationRequest r;
  r.prompt = "a red circle moving right";
  r.negative_prompt = "blurry";
  r.seed = 5;
  r.steps = 6;
  r.width = 32;
  r.height = 32;
  r.num_frames = 5;
  return r;
}

torch::Tensor frames_without_offload() {
  EngineArgs args;
  args.model = "example:wan-shaped";
  args.device = "cpu";
  Omni omni(args);
  return omni.generate(streamed_request()).frames;
}

// The position of the first event equal to `e` in `log`, or log.size().
std::size_t position(const std::vector<ResidencyEvent>& log, const ResidencyEvent& e) {
  return std::find(log.begin(), log.end(), e) - log.begin();
}

// What the device needs for model-level offload with rolling swaps, but not
// for prefetching a whole expert beside the other.
std::uint64_t rolling_capacity() {
  Omni probe(streamed_args());
  return probe.backend()->planned_peak_bytes() + 2 * probe.backend()->largest_group_bytes();
}

}  // namespace

// The high-noise expert's blocks leave after their last use in its final
// call and the low-noise expert's arrive into the space: the low expert is
// partly resident before the high one has left, and the peak never passes
// planned + 2 groups. The output is bitwise that of a run without offload.
TEST(StreamingOffload, ExpertsSwapBlockByBlockWithinPlannedPlusTwoGroups) {
  const auto capacity = rolling_capacity();
  Omni omni(streamed_args(capacity, /*link_gbps=*/2.0));
  auto* backend = omni.backend();
  const_cast<offload::ResidencyLedger&>(backend->ledger()).clear_log();
  auto out = omni.generate(streamed_request());
  EXPECT_TRUE(torch::equal(out.frames, frames_without_offload()));

  const auto log = backend->ledger().log();
  const auto low_arrives = position(log, {"transformer_2", Residency::partial});
  const auto high_leaves = position(log, {"transformer", Residency::host});
  ASSERT_LT(low_arrives, log.size()) << "the low-noise expert never streamed in";
  ASSERT_LT(high_leaves, log.size());
  EXPECT_LT(low_arrives, high_leaves) << "it arrived while the high-noise expert was still there";
  EXPECT_LE(out.report.peak_resident_bytes, capacity);
  EXPECT_GT(out.report.peak_resident_bytes, out.report.planned_peak_bytes)
      << "some of the low-noise expert came in beside the high-noise one";
  EXPECT_EQ(out.report.d2h_bytes, 0u);
  EXPECT_TRUE(out.report.streaming);
  // Every byte went up once: the encoder and both experts.
  const auto* enc = out.report.component("text_encoder");
  const auto* high = out.report.component("transformer");
  const auto* low = out.report.component("transformer_2");
  EXPECT_EQ(out.report.h2d_bytes >= enc->bytes + high->bytes + low->bytes, true);
  EXPECT_EQ(high->uploads, 1u);
  EXPECT_EQ(low->uploads, 1u);
  // What compute waited for lies inside the request, timed by the engine
  // and not by the recorder (whose exposed ≤ upload holds by its clamp).
  EXPECT_LT(out.report.exposed_transfer_seconds, out.seconds);
}

// Whole-component swaps (--offload-streaming off) expose their uploads:
// compute waits for all of a component's copies at its entry. Measured as
// the time compute waited after the copies were enqueued, so a link slow
// enough that the copies outlast the enqueueing (even under sanitizers).
TEST(StreamingOffload, StrictSwapsExposeWholeUploads) {
  auto args = streamed_args(64ull << 30, /*link_gbps=*/0.1);
  args.offload.streaming = false;
  Omni omni(args);
  auto out = omni.generate(streamed_request());
  EXPECT_FALSE(out.report.streaming);
  double upload = 0, exposed = 0;
  for (const char* name : {"text_encoder", "transformer", "transformer_2"}) {
    const auto* c = out.report.component(name);
    EXPECT_GT(c->upload_seconds, 0.0) << name;
    EXPECT_GT(c->exposed_seconds, 0.0) << name;
    upload += c->upload_seconds;
    exposed += c->exposed_seconds;
  }
  EXPECT_GE(exposed, 0.8 * upload) << "whole swaps hide next to nothing";
  EXPECT_EQ(out.report.peak_resident_bytes, out.report.planned_peak_bytes);
}

// Note [The seed's bound by default]: offload alone on a device with room
// for everything (64 GiB) keeps the model-level minimum + 2 groups, in the
// ledger and in the device's own figure; the frames do not change. (Before,
// both experts were prefetched whole: 7.44 MB against a 3.74 MB minimum.)
TEST(StreamingOffload, OffloadAloneKeepsTheSeedsBoundWhateverTheFreeMemory) {
  Omni omni(streamed_args());
  auto* backend = omni.backend();
  const auto bound = backend->planned_peak_bytes() + 2 * backend->largest_group_bytes();
  auto out = omni.generate(streamed_request());
  EXPECT_TRUE(torch::equal(out.frames, frames_without_offload()));
  EXPECT_LE(out.report.peak_resident_bytes, bound);
  // The device's figure adds each tensor's alignment padding to the weights.
  EXPECT_LE(out.report.device_peak_allocated_bytes, bound + bound / 50);
  EXPECT_GT(out.report.hidden_transfer_seconds + out.report.exposed_transfer_seconds, 0.0);
  // The same within a second request, whose encoder may come in during the decode.
  out = omni.generate(streamed_request());
  EXPECT_LE(out.report.peak_resident_bytes, bound);
  EXPECT_LE(out.report.device_peak_allocated_bytes, bound + bound / 50);
}

// With room for both, and spare memory asked for (what --offload auto sets),
// the next phase's component comes in during the current one: the first
// expert is on the device before the encoder leaves, and the frames do not
// change.
TEST(StreamingOffload, PrefetchesTheNextPhaseWhenSpareMemoryIsAskedFor) {
  auto args = streamed_args();
  args.offload.prefetch_into_spare_memory = true;
  Omni omni(args);
  auto* backend = omni.backend();
  const_cast<offload::ResidencyLedger&>(backend->ledger()).clear_log();
  auto out = omni.generate(streamed_request());
  EXPECT_TRUE(torch::equal(out.frames, frames_without_offload()));
  const auto log = backend->ledger().log();
  const auto high_arrives = position(log, {"transformer", Residency::device});
  const auto encoder_leaves = position(log, {"text_encoder", Residency::host});
  ASSERT_LT(high_arrives, log.size());
  EXPECT_LT(high_arrives, encoder_leaves);
  EXPECT_GT(out.report.peak_resident_bytes, out.report.planned_peak_bytes);
  EXPECT_EQ(out.report.d2h_bytes, 0u);
}

// The schedule of a queued request lets the next request's encoder come in
// while this one decodes; a second request then waits for no encoder upload
// of its own beyond what was prefetched.
TEST(StreamingOffload, QueuedRequestsEncoderArrivesDuringTheDecode) {
  const auto capacity = rolling_capacity();
  Omni omni(streamed_args(capacity));
  auto* backend = omni.backend();
  const auto resolved = omni.pipeline().resolve(streamed_request());
  auto first_calls = omni.pipeline().call_schedule(resolved);
  // Run request 1 by hand with request 2's calls queued behind it.
  backend->begin_request();
  backend->set_schedule(first_calls);
  backend->append_schedule(first_calls);
  {
    torch::NoGradGuard no_grad;
    omni.pipeline().run(resolved, {omni.device().compute_device(), {}});
  }
  EXPECT_NE(backend->ledger().where(*backend->ledger().find("text_encoder")), Residency::host)
      << "the next request's encoder is already on its way";
  EXPECT_EQ(backend->ledger().where(*backend->ledger().find("transformer_2")), Residency::host)
      << "the low-noise expert left early to make room";
  EXPECT_LE(backend->end_request().peak_resident_bytes, capacity);
}

// H5 of the GPU review: a copy that fails (a failed cudaMemcpyAsync, not an
// out-of-memory) fails its request with the device's error, wherever it
// happens: in a pre-forward hook, a block's hook, a prefetch or a rolling
// swap. The engine then runs the next request as if nothing had happened:
// nothing stays running (before, a failed prefetch left its
// component "running", and every later request was a ResidencyViolation).
// Tried at every copy of a request, with prefetches into spare memory on.
TEST(StreamingOffload, ACopyFailingAnywhereFailsOnlyItsRequest) {
  auto request = streamed_request();
  request.steps = 2;  // one step per expert
  request.num_frames = 1;
  auto args = streamed_args();
  args.offload.prefetch_into_spare_memory = true;
  torch::Tensor reference;
  {
    Omni clean(args);
    reference = clean.generate(request).frames;
  }
  int failed_requests = 0;
  for (int n = 1;; ++n) {
    ASSERT_LT(n, 2000) << "a request makes fewer copies than this";
    fault::Faults faults;
    faults.fail_copy_number = n;
    std::optional<Omni> omni;
    bool failed = false;
    {
      fault::ScopedFaults armed(faults);
      try {
        omni.emplace(args);
      } catch (const Error&) {
        continue;  // a copy at enable: rolled back (ModelLevelOffload tests)
      }
      try {
        (void)omni->generate(request);
      } catch (const ResidencyViolation& e) {
        FAIL() << "copy " << n << ": " << e.what();
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("injected fault at copy"), std::string::npos)
            << e.what();
        failed = true;
      }
    }
    if (!failed) break;  // past the last copy of the request
    ++failed_requests;
    const auto& ledger = omni->backend()->ledger();
    EXPECT_NO_THROW(ledger.verify()) << "copy " << n;
    try {
      EXPECT_TRUE(torch::equal(omni->generate(request).frames, reference)) << "copy " << n;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "after a failed copy " << n << ", the next request failed: " << e.what();
    }
  }
  EXPECT_GT(failed_requests, 10) << "the request's copies were each tried";
}

// M8 of the GPU review (Note [Transfers for the next request]): the next
// request's encoder, prefetched during this request's decode, is the next
// request's upload. This report neither counts it nor waits for it; the
// next report does. (Before, the first request counted the encoder twice
// and the second not at all.)
TEST(StreamingOffload, APrefetchForTheNextRequestIsThatRequestsUpload) {
  Omni omni(streamed_args(rolling_capacity()));
  auto second_request = streamed_request();
  second_request.prompt = "a blue square moving left";  // not in the prompt cache
  omni.set_lookahead({second_request});
  const auto first = omni.generate(streamed_request());
  EXPECT_NE(omni.backend()->ledger().where(*omni.backend()->ledger().find("text_encoder")),
            Residency::host)
      << "the next request's encoder is on its way";
  const auto encoder_bytes = first.report.component("text_encoder")->bytes;
  const auto uploaded = [](const offload::OffloadReport& r, const std::string& name) {
    std::uint64_t bytes = 0;
    for (const auto& t : r.transfers)
      if (t.component == name) bytes += t.bytes;
    return bytes;
  };
  EXPECT_EQ(first.report.component("text_encoder")->uploads, 1u);
  EXPECT_EQ(first.report.component("text_encoder")->upload_bytes, encoder_bytes);
  EXPECT_EQ(uploaded(first.report, "text_encoder"), encoder_bytes);

  const auto second = omni.generate(second_request);
  EXPECT_EQ(second.report.component("text_encoder")->uploads, 1u);
  EXPECT_EQ(second.report.component("text_encoder")->upload_bytes, encoder_bytes);
  EXPECT_EQ(uploaded(second.report, "text_encoder"), encoder_bytes);
  EXPECT_GT(second.report.component("text_encoder")->upload_seconds, 0.0);
  // The totals count it once.
  EXPECT_EQ(omni.offload_report().component("text_encoder")->upload_bytes, 2 * encoder_bytes);
}

// Copies still queued read the homes. A request cancelled while its blocks
// stream in leaves some that no fence is kept for; disable() (and so the
// engine's destructor, before the homes are freed) waits for them. It did
// not, and the link copied out of freed homes (a crash in CI).
TEST(StreamingOffload, DisableWaitsForTheCopiesACancelledRequestLeftQueued) {
  // A slow link (5 MB/s): the prefetched blocks are still queued when the request stops.
  Omni omni(streamed_args(64ull << 30, /*link_gbps=*/0.005));
  int points = 0;
  {
    const ScopedCancelCheck stop([&] {
      if (++points == 2) throw Cancelled("cancelled inside the text encoder");
    });
    EXPECT_THROW((void)omni.generate(streamed_request()), Cancelled);
  }
  const auto queued = omni.device().fence_uploads();
  ASSERT_FALSE(queued->done()) << "the slow link has copies queued when the request stops";
  omni.backend()->disable();
  EXPECT_TRUE(queued->done());
}

// A component called inside another running component that its activation
// would evict is a ResidencyViolation naming both (before, it evicted the
// outer one mid-forward).
namespace {
class CallsEncoderImpl : public nn::Module {
 public:
  explicit CallsEncoderImpl(toy::Layer encoder) : encoder_(std::move(encoder)) {
    linear = register_module("linear", torch::nn::Linear(8, 8));
  }
  torch::Tensor forward(torch::Tensor x) { return encoder_(linear(x)); }
  torch::nn::Linear linear{nullptr};

 private:
  toy::Layer encoder_;  // not a child: the encoder is its own component
};
OMNI_MODULE(CallsEncoder);

class NestingPipeline : public nn::Module {
 public:
  NestingPipeline() {
    text_encoder = register_module("text_encoder", toy::Layer(8, 8));
    transformer = register_module("transformer", CallsEncoder(text_encoder));
  }
  toy::Layer text_encoder{nullptr};
  CallsEncoder transformer{nullptr};
};
}  // namespace

TEST(StreamingOffload, AComponentCalledInsideAnotherItWouldEvictIsAViolation) {
  for (bool streaming : {true, false}) {
    NestingPipeline p;
    auto device = toy::sim();
    offload::OffloadOptions options;
    options.streaming = streaming;
    offload::ModelLevelOffloadBackend backend(*device, options);
    backend.enable(p, toy::spec({"transformer"}, {"text_encoder"}, {}, {}));
    torch::NoGradGuard no_grad;
    try {
      p.transformer(torch::ones({1, 8}));
      ADD_FAILURE() << "no ResidencyViolation";
    } catch (const ResidencyViolation& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("'text_encoder'"), std::string::npos) << what;
      EXPECT_NE(what.find("'transformer'"), std::string::npos) << what;
    }
    // The outer forward ended (by the exception): the components work again.
    EXPECT_NO_THROW(p.text_encoder(torch::ones({1, 8})));
  }
}

TEST(StreamingOffload, UnclaimedAndSharedTensorsAreConfigErrorsNamingThem) {
  {
    toy::ToyPipeline p({"text_encoder"}, {"transformer"});
    auto device = toy::sim();
    offload::ModelLevelOffloadBackend backend(*device);
    try {
      backend.enable(p, toy::spec({"transformer"}, {"text_encoder"}, {"vae"}, {}));
      ADD_FAILURE() << "no ConfigError";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("'group.inner.blocks.0.weight' belongs to no component"),
                std::string::npos)
          << e.what();
    }
    EXPECT_FALSE(backend.enabled());
    EXPECT_FALSE(device::is_unusable_placeholder(p.inner->linears[0]->weight));
  }
  {
    // One tensor registered in two components (a tied embedding across them).
    nn::Module p;
    auto shared = torch::randn({4, 4});
    auto encoder = p.register_module("text_encoder", std::make_shared<toy::Group>());
    auto dit = p.register_module("transformer", std::make_shared<toy::Group>());
    encoder->register_parameter("embedding", shared, false);
    dit->register_parameter("embedding", shared, false);
    auto device = toy::sim();
    offload::ModelLevelOffloadBackend backend(*device);
    try {
      backend.enable(p, toy::spec({"transformer"}, {"text_encoder"}, {}, {}));
      ADD_FAILURE() << "no ConfigError";
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("is shared by components"), std::string::npos) << what;
      EXPECT_NE(what.find("'text_encoder'"), std::string::npos) << what;
      EXPECT_NE(what.find("'transformer'"), std::string::npos) << what;
      EXPECT_NE(what.find(".embedding'"), std::string::npos) << what;
    }
  }
}

TEST(ResidencyLedger, LogKeepsOnlyTheLatestTransitions) {
  offload::ResidencyLedger ledger(true);
  const auto a = ledger.add("transformer", offload::Role::dit, 10, true);
  const std::size_t moves = offload::ResidencyLedger::kLogCapacity + 100;
  for (std::size_t i = 0; i < moves; ++i)
    ledger.transition(a, i % 2 == 0 ? Residency::device : Residency::host);
  const auto log = ledger.log();
  EXPECT_EQ(log.size(), offload::ResidencyLedger::kLogCapacity);
  EXPECT_EQ(log.back(), (ResidencyEvent{"transformer", Residency::host}));
}

// Note [Components in flight]: the next phase's component may be resident
// beside a running DiT only while it is the one in flight.
TEST(ResidencyLedger, OnlyTheIncomingComponentMayJoinARunningDit) {
  offload::ResidencyLedger ledger(true);
  const auto high = ledger.add("transformer", offload::Role::dit, 100, true);
  const auto low = ledger.add("transformer_2", offload::Role::dit, 100, true);
  const auto enc = ledger.add("text_encoder", offload::Role::encoder, 50, true);
  ledger.transition(high, Residency::device);
  EXPECT_THROW(ledger.move_bytes(low, 10), ResidencyViolation);
  ledger.set_incoming(low);
  ledger.move_bytes(low, 10);
  EXPECT_EQ(ledger.where(low), Residency::partial);
  EXPECT_THROW(ledger.move_bytes(enc, 10), ResidencyViolation) << "only one component in flight";
  // The running expert must be gone before the incoming one stops being in flight.
  EXPECT_THROW(ledger.set_incoming(std::nullopt), ResidencyViolation);
  EXPECT_EQ(ledger.incoming(), low) << "unchanged by the refused call";
  ledger.transition(high, Residency::host);
  ledger.set_incoming(std::nullopt);
  ledger.move_bytes(low, 90);
  EXPECT_EQ(ledger.where(low), Residency::device);
  EXPECT_EQ(ledger.resident_bytes(), 100u);
}
