#include "omni/offload/host_home.h"

#include <gtest/gtest.h>

#include "offload/rebind.h"
#include "offload/toy_pipeline.h"
#include "omni/error.h"
#include "testing/fault_injection.h"

using namespace omni;
using toy::sim;

namespace {

std::unique_ptr<offload::HostHome> build(toy::Layer& layer, device::Device& device,
                                         offload::HostHomeOptions options = {},
                                         bool* pin_refused = nullptr,
                                         const std::function<void(offload::TensorSlot&)>& cb = {}) {
  bool refused = false;
  return offload::HostHome::build("layer", *layer, device, options,
                                  pin_refused ? pin_refused : &refused, cb);
}

}  // namespace

TEST(HostHome, OneAlignedSlotPerTensorGroupedByBlockInExecutionOrder) {
  toy::Layer layer(8, 4, 3);  // blocks.0..2, each a Linear with weight and bias
  auto device = sim();
  const auto home = build(layer, *device);
  ASSERT_EQ(home->slots().size(), 6u);
  ASSERT_EQ(home->groups().size(), 3u);
  std::uint64_t payload = 0;
  std::size_t previous_end = 0;
  for (std::size_t g = 0; g < 3; ++g) {
    const auto& group = home->groups()[g];
    EXPECT_EQ(group.name, "blocks." + std::to_string(g));
    EXPECT_EQ(group.begin, previous_end) << "groups are contiguous, in order";
    previous_end = group.end;
    ASSERT_EQ(group.slots.size(), 2u);
    for (auto index : group.slots) {
      const auto& slot = home->slots()[index];
      EXPECT_EQ(slot.offset % 256, 0u) << slot.name;
      EXPECT_GE(slot.offset, group.begin);
      EXPECT_LE(slot.offset + slot.bytes, group.end);
      EXPECT_TRUE(torch::equal(slot.home, slot.live)) << slot.name << ": the home holds the values";
      EXPECT_NE(slot.home.data_ptr(), slot.live.data_ptr()) << "a copy, not an alias";
      payload += slot.bytes;
    }
  }
  EXPECT_EQ(home->bytes(), payload);
  EXPECT_EQ(payload, offload::tensor_bytes(*layer));
}

TEST(HostHome, TiedWeightsGetOneHome) {
  torch::nn::Module root;
  const auto shared = torch::randn({4, 4});
  for (const char* name : {"a", "b"}) {
    auto child = root.register_module(name, std::make_shared<torch::nn::Module>());
    child->register_parameter("w", shared);
    child->register_parameter("own", torch::randn({2}));
  }
  auto device = sim();
  bool refused = false;
  const auto home = offload::HostHome::build("root", root, *device, {}, &refused);
  ASSERT_EQ(home->slots().size(), 3u) << "a.w, a.own, b.own";
  EXPECT_EQ(home->slots()[0].name, "a.w");
  EXPECT_EQ(home->bytes(), (16u + 2u + 2u) * sizeof(float));
}

// Note: the contract the backend relies on to keep host memory at the
// weights' size during enable — the callback sees each slot right after its
// copy, and the builder keeps no reference of its own to the original.
TEST(HostHome, CallbackRunsPerSlotRightAfterItsCopyAndTheOriginalCanGo) {
  toy::Layer layer(8, 8, 3);
  std::vector<c10::weak_intrusive_ptr<c10::StorageImpl>> originals;
  std::vector<torch::Tensor> values;
  for (auto& p : layer->parameters()) {
    originals.push_back(p.storage().getWeakStorageImpl());
    values.push_back(p.detach().clone());
  }
  auto device = sim();
  std::size_t calls = 0;
  const auto home = build(layer, *device, {}, nullptr, [&](offload::TensorSlot& slot) {
    EXPECT_TRUE(torch::equal(slot.home, values[calls])) << slot.name;
    for (std::size_t i = 0; i < originals.size(); ++i)
      EXPECT_EQ(originals[i].expired(), i < calls) << "at slot " << calls << ", original " << i;
    offload::rebind(slot.live, device->offloaded_view(slot.home));
    ++calls;
  });
  EXPECT_EQ(calls, originals.size());
  for (const auto& w : originals) EXPECT_TRUE(w.expired());
}

TEST(HostHome, PinnedInBoundedChunksAndPageableOnceRefused) {
  toy::Layer layer(64, 64, 4);  // 4 × (16 KiB + 256 B)
  device::DeviceOptions options;
  omni::fault::Faults faults;
  faults.pin_budget_bytes = 16 << 10;  // room for a few pages only
  omni::fault::ScopedFaults armed(faults);
  auto device = sim(options);
  bool refused = false;
  const auto home =
      build(layer, *device, {.pin_memory = true, .max_pin_chunk_bytes = 4096}, &refused);
  const auto& pieces = home->region().pieces();
  ASSERT_GT(pieces.size(), 4u);
  for (const auto& piece : pieces) EXPECT_LE(piece.end - piece.begin, 4096u);
  EXPECT_TRUE(refused);
  EXPECT_TRUE(pieces.front().pinned);
  EXPECT_FALSE(pieces.back().pinned);
  EXPECT_GT(home->pinned_bytes(), 0u);
  EXPECT_LE(home->pinned_bytes(), 16u << 10);
  EXPECT_EQ(home->pinned_bytes() + home->pageable_bytes(), home->region().size());
}

TEST(HostHome, TensorNotMaterialisedIsRefusedBeforeAnythingIsCopied) {
  toy::Layer layer(8, 8, 2);
  auto& bias = layer->linears[1]->bias;
  offload::rebind(bias, device::make_unusable_placeholder(bias));
  auto device = sim();
  std::size_t calls = 0;
  try {
    build(layer, *device, {}, nullptr, [&](offload::TensorSlot&) { ++calls; });
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("blocks.1.bias"), std::string::npos) << e.what();
  }
  EXPECT_EQ(calls, 0u);
}
