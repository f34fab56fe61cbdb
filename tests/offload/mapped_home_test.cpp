// Note [Mapped homes]: the plan (pinned while the budget lasts, in swap
// order), mapped homes that copy nothing, and uploads through the staging
// ring that land the same bytes as uploads from a pinned home.
#include <gtest/gtest.h>

#include "offload/toy_pipeline.h"
#include "omni/error.h"
#include "omni/offload/host_home.h"
#include "omni/offload/host_memory_plan.h"
#include "omni/offload/mover.h"
#include "omni/offload/staging_ring.h"

using namespace omni;
using offload::HomeKind;
using offload::HostMemoryPlan;
using offload::Role;

namespace {

std::vector<HostMemoryPlan::Component> a14b_like() {
  return {{"text_encoder", Role::encoder, 11, HomeKind::pinned},
          {"transformer", Role::dit, 28, HomeKind::pinned},
          {"transformer_2", Role::dit, 28, HomeKind::pinned},
          {"vae", Role::vae, 1, HomeKind::pinned}};
}

// Every tensor of a home built for `layer` with `options`, after uploading
// each group with a mover and waiting for it: the values compute would see.
std::vector<torch::Tensor> uploaded_values(toy::Layer& layer, device::Device& device,
                                           const offload::HostHomeOptions& options) {
  bool refused = false;
  auto home = offload::HostHome::build("layer", *layer, device, options, &refused);
  offload::Mover mover(device);
  std::vector<offload::ResidentGroup> groups;
  for (std::size_t g = 0; g < home->groups().size(); ++g) {
    groups.push_back(mover.upload(*home, g));
    mover.wait(groups.back());
  }
  std::vector<torch::Tensor> values;
  for (const auto& slot : home->slots()) values.push_back(slot.live.clone());
  for (std::size_t g = 0; g < groups.size(); ++g) mover.release(*home, g, groups[g], true);
  return values;
}

}  // namespace

TEST(HostMemoryPlan, PinsWhatFitsInSwapOrderAndMapsTheRest) {
  const auto unbudgeted = HostMemoryPlan::make(a14b_like(), std::nullopt, 4);
  EXPECT_FALSE(unbudgeted.maps_any());
  EXPECT_EQ(unbudgeted.pinned_bytes(), 68u) << "no budget: every home pinned, no ring";

  const auto plan = HostMemoryPlan::make(a14b_like(), 40, 4);
  EXPECT_EQ(plan.kind_of("transformer"), HomeKind::pinned) << "DiTs swap most: first pick";
  EXPECT_EQ(plan.kind_of("transformer_2"), HomeKind::mapped) << "8 left after the first";
  EXPECT_EQ(plan.kind_of("text_encoder"), HomeKind::mapped);
  EXPECT_EQ(plan.kind_of("vae"), HomeKind::mapped) << "uploaded once: never worth pinning";
  EXPECT_EQ(plan.pinned_bytes(), 28u + 4u);
  EXPECT_EQ(plan.mapped_bytes(), 11u + 28u + 1u);

  for (std::uint64_t budget = 4; budget <= 80; ++budget) {
    const auto p = HostMemoryPlan::make(a14b_like(), budget, 4);
    EXPECT_LE(p.pinned_bytes(), budget) << budget;
    EXPECT_EQ(p.pinned_bytes() - 4 + p.mapped_bytes(), 68u) << budget;
    // A mapped encoder or DiT did not fit in what was left at its turn.
    std::uint64_t left = budget - 4;
    for (const auto* name : {"transformer", "transformer_2", "text_encoder"}) {
      const auto bytes = std::string(name) == "text_encoder" ? 11u : 28u;
      if (p.kind_of(name) == HomeKind::pinned)
        left -= bytes;
      else
        EXPECT_GT(bytes, left) << name << " at budget " << budget;
    }
  }
  EXPECT_THROW(HostMemoryPlan::make(a14b_like(), 3, 4), ConfigError);
}

TEST(MappedHome, AliasesTheTensorsAndUploadsTheSameBytesThroughTheRing) {
  auto device = toy::sim();
  toy::Layer layer(64, 64, 3);  // 16 KiB weights: several ring pieces each
  std::vector<torch::Tensor> expected;
  std::vector<const void*> storage;
  for (auto& p : layer->parameters()) {
    expected.push_back(p.detach().clone());
    storage.push_back(p.data_ptr());
  }
  auto plan = std::make_shared<HostMemoryPlan>(
      HostMemoryPlan::make({{"layer", Role::dit, 1ull << 20, HomeKind::pinned}}, 8192, 8192));
  ASSERT_EQ(plan->kind_of("layer"), HomeKind::mapped);
  auto ring = std::make_shared<offload::StagingRing>(*device, 8192);
  EXPECT_EQ(ring->bytes(), 8192u) << "bounded: two buffers of a page";
  offload::HostHomeOptions mapped;
  mapped.mapped = {plan, ring};

  {
    bool refused = false;
    auto home = offload::HostHome::build("layer", *layer, *device, mapped, &refused);
    EXPECT_EQ(home->kind(), HomeKind::mapped);
    EXPECT_EQ(home->pinned_bytes(), 0u);
    EXPECT_EQ(home->mapped_bytes(), home->bytes());
    for (std::size_t i = 0; i < home->slots().size(); ++i)
      EXPECT_EQ(home->slots()[i].home.data_ptr(), storage[i]) << "no copy: the tensor is the home";
  }
  const auto through_ring = uploaded_values(layer, *device, mapped);
  const auto from_pinned = uploaded_values(layer, *device, {});
  ASSERT_EQ(through_ring.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_TRUE(torch::equal(through_ring[i], expected[i])) << i;
    EXPECT_TRUE(torch::equal(from_pinned[i], expected[i])) << i;
  }
}
