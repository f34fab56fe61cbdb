// Budgeted offload (--device-memory-budget, Note [Residency policies]):
// components stay while they fit, within and across requests; under a
// tighter budget the bytes uploaded are no more than the exact minimum of
// any whole-component eviction order; the peak stays within the budget; the
// frames are those of a run without offload; a budget nothing fits in is a
// configuration error before anything moves.
#include <gtest/gtest.h>

#include "offload/wan_shaped_fixture.h"
#include "omni/error.h"
#include "omni/offload/backend.h"
#include "omni/offload/policy.h"
#include "omni/omni.h"

using namespace omni;
using offload::Residency;

namespace {

EngineArgs budget_args(std::uint64_t budget) {
  auto args = wan_shaped::args();
  args.offload.device_memory_budget = budget;
  return args;
}

// The ledger as the policy sees it, and which components are resident.
struct Snapshot {
  std::vector<offload::PolicyState::Entry> entries;
  std::vector<bool> resident;
};
Snapshot snapshot_of(const offload::ResidencyLedger& ledger) {
  Snapshot s;
  for (const auto& e : ledger.entries()) {
    s.entries.push_back({e.name, e.role, e.bytes, e.resident_bytes, e.swappable});
    s.resident.push_back(e.resident_bytes > 0);
  }
  return s;
}

std::vector<std::size_t> indices(const offload::ResidencyLedger& ledger,
                                 const std::vector<std::string>& calls) {
  std::vector<std::size_t> out;
  for (const auto& name : calls) out.push_back(*ledger.find(name));
  return out;
}

}  // namespace

// A budget that holds everything: each component goes up once, the second
// request uploads nothing, and nothing ever leaves.
TEST(BudgetOffload, ABudgetForEverythingUploadsEachComponentOnce) {
  const auto total = wan_shaped::sizes().total;
  Omni omni(budget_args(total));
  EXPECT_EQ(omni.backend()->strategy(), "budget");
  auto first = omni.generate(wan_shaped::request());
  auto second = omni.generate(wan_shaped::request(4));
  EXPECT_EQ(first.report.h2d_bytes, total);
  EXPECT_EQ(second.report.h2d_bytes, 0u) << "everything stayed across requests";
  for (const auto& c : second.report.components) EXPECT_EQ(c.where, Residency::device) << c.name;
  EXPECT_TRUE(
      torch::equal(first.frames, wan_shaped::frames_without_offload(wan_shaped::request())));
  EXPECT_TRUE(
      torch::equal(second.frames, wan_shaped::frames_without_offload(wan_shaped::request(4))));
}

// A budget for the largest expert and a bit: every request uploads no more
// than the exact minimum for its schedule from where the last one left the
// device, the peak stays within the budget, and the frames do not change.
TEST(BudgetOffload, ATightBudgetMovesNoMoreThanTheExactMinimum) {
  const auto sizes = wan_shaped::sizes();
  const std::uint64_t budget = sizes.largest + sizes.vae + sizes.largest / 4;
  Omni omni(budget_args(budget));
  const auto& ledger = omni.backend()->ledger();
  for (std::uint64_t seed : {3, 4, 5}) {
    const auto before = snapshot_of(ledger);
    const auto calls = indices(
        ledger, omni.pipeline().call_schedule(omni.pipeline().resolve(wan_shaped::request(seed))));
    const auto minimum =
        offload::plan_evictions(before.entries, before.resident, calls, budget).upload_bytes;
    auto out = omni.generate(wan_shaped::request(seed));
    EXPECT_LE(out.report.h2d_bytes, minimum) << "seed " << seed;
    EXPECT_GT(out.report.h2d_bytes, 0u) << "the budget forces swaps";
    EXPECT_LE(out.report.peak_resident_bytes, budget) << "seed " << seed;
    // Device buffers keep each tensor 256-byte aligned: a little over the weights.
    EXPECT_LE(out.report.device_peak_allocated_bytes, budget + budget / 100) << "seed " << seed;
    EXPECT_TRUE(
        torch::equal(out.frames, wan_shaped::frames_without_offload(wan_shaped::request(seed))))
        << "seed " << seed;
  }
}

// The strict rules apply only where the budget forces them: with room for
// the encoder beside an expert, both may be resident at once.
TEST(BudgetOffload, TheSeedsExclusionAppliesOnlyWhereTheBudgetForcesIt) {
  Omni omni(budget_args(wan_shaped::sizes().total));
  omni.generate(wan_shaped::request());
  const auto& ledger = omni.backend()->ledger();
  EXPECT_EQ(ledger.where(*ledger.find("text_encoder")), Residency::device);
  EXPECT_EQ(ledger.where(*ledger.find("transformer")), Residency::device);
  EXPECT_NO_THROW(ledger.verify());
}

TEST(BudgetOffload, ABudgetTooSmallForTheLargestComponentIsAConfigErrorBeforeAnythingMoves) {
  const auto largest = wan_shaped::sizes().largest;
  try {
    Omni omni(budget_args(largest - 1));
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("does not fit the device memory budget"), std::string::npos) << what;
    EXPECT_NE(what.find("component '"), std::string::npos) << what;
  }
  auto args = budget_args(0);
  EXPECT_THROW(args.validate(), ConfigError);
}

// Without a budget, --enable-cpu-offload keeps the strict model-level rules.
TEST(BudgetOffload, WithoutABudgetOffloadStaysStrict) {
  auto args = budget_args(1);
  args.offload.device_memory_budget.reset();
  args.enable_cpu_offload = true;
  EXPECT_EQ(args.offload_policy(), offload::PolicyKind::model_level);
  Omni omni(args);
  EXPECT_EQ(omni.backend()->strategy(), "model-level");
  args.enable_cpu_offload = false;
  EXPECT_EQ(args.offload_policy(), offload::PolicyKind::all_resident);
}
