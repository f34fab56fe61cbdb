// Choosing an offload mode (Note [Choosing an offload mode]) on Wan2.2
// A14B's sizes: each mode where it is the right one, the reason given, and
// the bytes per request it costs.
#include <gtest/gtest.h>

#include "offload/wan_shaped_fixture.h"
#include "omni/error.h"
#include "omni/offload/auto_plan.h"
#include "omni/omni.h"

using namespace omni;
using offload::ComponentSize;
using offload::PolicyKind;
using offload::Role;

namespace {

constexpr std::uint64_t kMB = 1000ull * 1000;

// A14B in MB: UMT5 11.4 GB (24 blocks), two 28.6 GB experts (40 blocks), a 0.25 GB VAE.
std::vector<ComponentSize> a14b() {
  return {{"text_encoder", Role::encoder, 11400 * kMB, 11000 * kMB, 460 * kMB, 460 * kMB},
          {"transformer", Role::dit, 28600 * kMB, 28400 * kMB, 710 * kMB, 710 * kMB},
          {"transformer_2", Role::dit, 28600 * kMB, 28400 * kMB, 710 * kMB, 710 * kMB},
          {"vae", Role::vae, 250 * kMB, 0, 0, 60 * kMB}};
}

// Two encoder calls, 40 CFG steps split between the experts, the decode.
std::vector<std::size_t> a14b_calls() {
  std::vector<std::size_t> calls{0, 0};
  for (int step = 0; step < 40; ++step) calls.insert(calls.end(), 2, step < 20 ? 1 : 2);
  calls.push_back(3);
  return calls;
}

offload::OffloadChoice choose(std::uint64_t budget_mb) {
  return offload::choose_offload(a14b(), budget_mb * kMB, 1, a14b_calls());
}

// A device that only reports memory figures, as a CUDA card with a caching
// allocator would: nothing else of it is used.
class StatsOnlyDevice final : public device::Device {
 public:
  explicit StatsOnlyDevice(device::MemoryStats stats) : stats_(stats) {}
  device::DeviceKind kind() const override { return device::DeviceKind::cuda; }
  std::string name() const override { return "stats-only"; }
  torch::Device compute_device() const override { return torch::kCPU; }
  std::shared_ptr<void> pin_host(void*, std::size_t) override {
    return unused<std::shared_ptr<void>>();
  }
  torch::Tensor allocate(std::size_t) override { return unused<torch::Tensor>(); }
  void copy_to_device(torch::Tensor&, std::size_t, const void*, std::size_t, bool) override {
    unused<int>();
  }
  std::shared_ptr<device::UploadFence> fence_uploads() override {
    return unused<std::shared_ptr<device::UploadFence>>();
  }
  std::unique_ptr<device::DeviceDuration> wait_for(
      const std::shared_ptr<device::UploadFence>&) override {
    return unused<std::unique_ptr<device::DeviceDuration>>();
  }
  std::unique_ptr<device::TransferTimer> start_transfer_timer() override {
    return unused<std::unique_ptr<device::TransferTimer>>();
  }
  void retire(torch::Tensor&) override { unused<int>(); }
  torch::Tensor offloaded_view(const torch::Tensor&) override { return unused<torch::Tensor>(); }
  void synchronize() override { unused<int>(); }
  device::MemoryStats memory_stats() const override { return stats_; }
  void reset_peak() override { unused<int>(); }

 private:
  template <typename T>
  static T unused() {
    throw InternalError("StatsOnlyDevice: only memory_stats() is implemented");
  }
  device::MemoryStats stats_;
};

}  // namespace

// The default budget counts the allocator's cache as usable (cudaMemGetInfo
// counts it as used): after an earlier engine in the same process left 30 GB
// cached, the budget is still the card minus the reserve (M3 of the GPU
// review).
TEST(DeviceBudget, CountsTheAllocatorsCacheAsUsable) {
  constexpr std::uint64_t kGiB = 1ull << 30;
  device::MemoryStats stats;
  stats.capacity_bytes = 80 * kGiB;
  stats.allocated_bytes = 2 * kGiB;  // handed out now
  stats.reserved_bytes = 32 * kGiB;  // handed out or cached
  stats.free_bytes = 48 * kGiB;      // the rest of the card
  StatsOnlyDevice device(stats);
  offload::OffloadOptions options;
  options.reserve_bytes = 16 * kGiB;
  EXPECT_EQ(offload::device_budget(device, options), 64 * kGiB);
  options.device_memory_budget = 10 * kGiB;  // an explicit budget is taken as given
  EXPECT_EQ(offload::device_budget(device, options), 10 * kGiB);
}

TEST(ChooseOffload, EverythingFitsMeansAllResident) {
  const auto c = choose(80000);
  EXPECT_EQ(c.kind, PolicyKind::all_resident);
  EXPECT_EQ(c.bytes_per_request, 0u);
  EXPECT_NE(c.why.find("fit the budget"), std::string::npos) << c.why;
}

// 41 GB holds the encoder beside an expert: the budget keeps it across
// requests and moves only the experts.
TEST(ChooseOffload, RoomBesideAnExpertMeansTheBudgetPolicy) {
  const auto c = choose(41000);
  EXPECT_EQ(c.kind, PolicyKind::budget) << c.why;
  EXPECT_EQ(c.bytes_per_request, 2 * 28600 * kMB);
  EXPECT_EQ(
      offload::bytes_per_request(PolicyKind::model_level, a14b(), 41000 * kMB, 1, a14b_calls()),
      (11400 + 2 * 28600) * kMB);
}

// 31 GB: one phase at a time with the rolling margin, and nothing more to keep.
TEST(ChooseOffload, OnePhaseAtATimeMeansStreamedModelLevel) {
  const auto c = choose(31000);
  EXPECT_EQ(c.kind, PolicyKind::model_level) << c.why;
  EXPECT_EQ(c.bytes_per_request, (11400 + 2 * 28600) * kMB);
  EXPECT_NE(c.why.find("one phase at a time fits"), std::string::npos) << c.why;
}

// 30 GB: an expert fits but not the rolling swap's margin.
TEST(ChooseOffload, NoRollingMarginMeansTheBudgetPolicy) {
  EXPECT_EQ(choose(30000).kind, PolicyKind::budget);
}

// A 24 GB card: an expert does not fit, its blocks stream.
TEST(ChooseOffload, AnExpertTooLargeMeansLayerwise) {
  const auto c = choose(24000);
  EXPECT_EQ(c.kind, PolicyKind::layerwise);
  EXPECT_NE(c.why.find("'transformer"), std::string::npos) << c.why;
  // Every DiT call streams its blocks: 80 calls of 28.4 GB; the encoder and
  // the VAE fit beside the window and stay.
  EXPECT_EQ(c.bytes_per_request, 80 * 28400 * kMB);
}

TEST(ChooseOffload, NothingFitsIsAConfigError) {
  EXPECT_THROW(choose(500), ConfigError);
}

TEST(ChooseOffload, BlockGroupsAreNamedLikeBlocksN) {
  EXPECT_TRUE(offload::is_block_group("blocks.12"));
  EXPECT_TRUE(offload::is_block_group("encoder.block.3"));
  EXPECT_FALSE(offload::is_block_group("patch_embedding"));
  EXPECT_FALSE(offload::is_block_group(""));
}

// --offload auto on the wan-shaped example: a sim device smaller than an
// expert gets layerwise and the same frames; a large one all-resident.
TEST(ChooseOffload, OffloadAutoPicksAndSaysWhy) {
  const auto dit = wan_shaped::sizes().largest_dit;
  auto args = wan_shaped::args();
  args.offload_auto = true;
  args.sim_memory_bytes = dit * 9 / 10;
  Omni small(args);
  ASSERT_TRUE(small.offload_choice().has_value());
  EXPECT_EQ(small.offload_choice()->kind, PolicyKind::layerwise) << small.offload_choice()->why;
  EXPECT_EQ(small.backend()->strategy(), "layerwise");

  args.sim_memory_bytes = 64ull << 30;
  Omni large(args);
  EXPECT_EQ(large.offload_choice()->kind, PolicyKind::all_resident);
  EXPECT_EQ(large.backend()->strategy(), "all-resident");
}
