// Layerwise offload (--enable-layerwise-offload, Note [Residency policies]):
// on a sim device smaller than one DiT the request runs, its frames are
// those of a run without offload, the peak stays within the device, and the
// blocks stream through every call.
#include <gtest/gtest.h>

#include <algorithm>

#include "offload/wan_shaped_fixture.h"
#include "omni/error.h"
#include "omni/offload/backend.h"
#include "omni/omni.h"

using namespace omni;
using offload::Residency;

namespace {

EngineArgs layerwise_args(std::uint64_t sim_memory, std::size_t prefetch = 1) {
  auto args = wan_shaped::args();
  args.sim_memory_bytes = sim_memory;
  args.enable_layerwise_offload = true;
  args.offload.prefetch_blocks = prefetch;
  return args;
}

}  // namespace

TEST(LayerwiseOffload, RunsOnADeviceSmallerThanOneDiTWithTheSameFrames) {
  const auto dit = wan_shaped::sizes().largest_dit;
  const std::uint64_t memory = dit - 1;
  for (std::size_t prefetch : {1, 2}) {
    Omni omni(layerwise_args(memory, prefetch));
    EXPECT_EQ(omni.backend()->strategy(), "layerwise");
    auto out = omni.generate(wan_shaped::request());
    EXPECT_TRUE(torch::equal(out.frames, wan_shaped::frames_without_offload(wan_shaped::request())))
        << "prefetch " << prefetch;
    EXPECT_LE(out.report.peak_resident_bytes, memory) << "prefetch " << prefetch;
    // The sim device refuses past its capacity; its buffers hold aligned weights.
    EXPECT_LE(out.report.device_peak_allocated_bytes, memory) << "prefetch " << prefetch;
    // No DiT was ever resident whole.
    for (const auto& e : omni.backend()->ledger().entries())
      if (e.role == offload::Role::dit) EXPECT_NE(e.where, Residency::device) << e.name;
    EXPECT_EQ(out.report.d2h_bytes, 0u);
  }
}

// Every call of a DiT streams its blocks again: the bytes uploaded for an
// expert are many times its size.
TEST(LayerwiseOffload, BlocksStreamThroughEveryCall) {
  const auto dit = wan_shaped::sizes().largest_dit;
  Omni omni(layerwise_args(dit * 9 / 10));
  const auto resolved = omni.pipeline().resolve(wan_shaped::request());
  const auto calls = omni.pipeline().call_schedule(resolved);
  const auto high_calls = std::count(calls.begin(), calls.end(), std::string("transformer"));
  ASSERT_GE(high_calls, 2);
  auto out = omni.generate(wan_shaped::request());
  const auto* high = out.report.component("transformer");
  ASSERT_NE(high, nullptr);
  EXPECT_GE(high->upload_bytes, static_cast<std::uint64_t>(high_calls - 1) * high->bytes / 2)
      << "the blocks came up once per call";
  EXPECT_LE(out.report.peak_resident_bytes, dit * 9 / 10);
}

TEST(LayerwiseOffload, ABudgetTooSmallForTheWindowIsAConfigErrorNamingTheSizes) {
  try {
    Omni omni(layerwise_args(4096));
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("too small for layerwise offload"), std::string::npos) << what;
    EXPECT_NE(what.find("blocks of"), std::string::npos) << what;
  }
}

TEST(LayerwiseOffload, PrefetchDepthIsValidated) {
  auto args = layerwise_args(1 << 30, 0);
  EXPECT_THROW(args.validate(), ConfigError);
  args.offload.prefetch_blocks = 65;
  EXPECT_THROW(args.validate(), ConfigError);
}
