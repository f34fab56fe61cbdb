#include "omni/device/device.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "omni/error.h"
#include "testing/fault_injection.h"

using namespace omni::device;

TEST(DeviceSpec, ParsesEveryKind) {
  EXPECT_EQ(DeviceSpec::parse("auto").kind, DeviceKind::automatic);
  EXPECT_EQ(DeviceSpec::parse("cpu").kind, DeviceKind::cpu);
  EXPECT_EQ(DeviceSpec::parse("sim").kind, DeviceKind::sim);
  auto c = DeviceSpec::parse("cuda:3");
  EXPECT_EQ(c.kind, DeviceKind::cuda);
  EXPECT_EQ(c.index, 3);
  EXPECT_EQ(c.to_string(), "cuda:3");
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda:-1", "", "SIM"}) {
    try {
      DeviceSpec::parse(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const omni::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("unknown device"), std::string::npos);
    }
  }
}

TEST(DeviceSpec, AutoResolvesToSimWithOffloadAndCpuWithout) {
  if (cuda_available()) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_EQ(make_device(DeviceSpec::parse("auto"), true)->kind(), DeviceKind::sim);
  EXPECT_EQ(make_device(DeviceSpec::parse("auto"), false)->kind(), DeviceKind::cpu);
}

// cuda:0 with no CUDA device to run on is a ConfigError that says why: a
// build without the CUDA device, or (scripts/build-cuda on a machine without
// a GPU) none visible.
TEST(DeviceSpec, CudaWithoutACudaDeviceIsAClearError) {
  if (cuda_available()) GTEST_SKIP() << "a CUDA device is present";
#if OMNI_WITH_CUDA
  const std::string why = "0 CUDA device(s) visible";
#else
  const std::string why = "not available";
#endif
  try {
    make_device(DeviceSpec::parse("cuda:0"), true);
    FAIL();
  } catch (const omni::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
  }
}

TEST(ByteSize, ParsesUnits) {
  EXPECT_EQ(parse_byte_size("1048576"), 1048576u);
  EXPECT_EQ(parse_byte_size("2GiB"), 2ull << 30);
  EXPECT_EQ(parse_byte_size("512MiB"), 512ull << 20);
  EXPECT_EQ(parse_byte_size("1.5GB"), 1500000000ull);
  EXPECT_THROW(parse_byte_size("lots"), omni::ConfigError);
  EXPECT_THROW(parse_byte_size("3 parsecs"), omni::ConfigError);
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
}

// Sizes past 2^64 bytes are a ConfigError saying so, not an undefined
// conversion (L6 of the GPU review); the largest that fit still parse.
TEST(ByteSize, TooLargeIsAConfigErrorNotAWrappedNumber) {
  EXPECT_EQ(parse_byte_size("16000000TiB"), 16000000ull << 40);
  for (const char* huge : {"1e30GiB", "20000000TiB", "18446744073709551616", "1e300"}) {
    try {
      (void)parse_byte_size(huge);
      ADD_FAILURE() << huge << " parsed";
    } catch (const omni::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("too large"), std::string::npos) << e.what();
    }
  }
}

TEST(SimDevice, EnforcesCapacityWithTypedError) {
  DeviceOptions options;
  options.sim_memory_bytes = 1000;
  auto sim = make_device(DeviceSpec::parse("sim"), true, options);
  auto a = sim->allocate(600);
  EXPECT_EQ(sim->memory_stats().allocated_bytes, 600u);
  EXPECT_THROW(sim->allocate(600), omni::DeviceOutOfMemory);
  EXPECT_EQ(sim->memory_stats().allocated_bytes, 600u) << "a refused allocation holds nothing";
  a = torch::Tensor();
  EXPECT_EQ(sim->memory_stats().allocated_bytes, 0u) << "dropping the buffer frees it";
  EXPECT_EQ(sim->memory_stats().peak_allocated_bytes, 600u);
  auto b = sim->allocate(1000);
  EXPECT_EQ(sim->memory_stats().allocated_bytes, 1000u);
}

TEST(SimDevice, InjectedAllocationFaultFiresOnce) {
  DeviceOptions options;
  omni::fault::Faults faults;
  faults.fail_allocation_number = 2;
  omni::fault::ScopedFaults armed(faults);
  auto sim = make_device(DeviceSpec::parse("sim"), true, options);
  EXPECT_NO_THROW(sim->allocate(8));
  EXPECT_THROW(sim->allocate(8), omni::DeviceOutOfMemory);
  EXPECT_NO_THROW(sim->allocate(8));
}

TEST(SimDevice, PinBudgetRefusesPastTheLimit) {
  DeviceOptions options;
  omni::fault::Faults faults;
  faults.pin_budget_bytes = 4096;
  omni::fault::ScopedFaults armed(faults);
  auto sim = make_device(DeviceSpec::parse("sim"), true, options);
  std::vector<char> memory(8192);
  auto first = sim->pin_host(memory.data(), 4096);
  EXPECT_NE(first, nullptr);
  EXPECT_EQ(sim->pin_host(memory.data() + 4096, 4096), nullptr);
  first.reset();  // unpins
  auto second = sim->pin_host(memory.data() + 4096, 4096);
  EXPECT_NE(second, nullptr);
  sim.reset();
  second.reset();  // a pin handle may outlive its device
}

TEST(SimDevice, CopiesLandInTheBuffer) {
  auto sim = make_device(DeviceSpec::parse("sim"), true);
  auto buffer = sim->allocate(16);
  std::vector<std::uint8_t> src(8, 7);
  sim->copy_to_device(buffer, 8, src.data(), 8, true);
  sim->wait_for(sim->fence_uploads());
  EXPECT_EQ(buffer[8].item<int>(), 7);
  EXPECT_EQ(buffer[15].item<int>(), 7);
}

// Note [The sim link]: copies run on the link's thread, in order, each taking
// at least bytes / speed; compute (this thread) waits only when it asks to.
TEST(SimDevice, LinkCopiesAsynchronouslyAtItsSpeed) {
  DeviceOptions options;
  options.sim_link_gbps = 0.5;  // 20 MB: at least 40 ms
  auto sim = make_device(DeviceSpec::parse("sim"), true, options);
  const std::size_t bytes = 20'000'000;
  std::vector<std::uint8_t> src(bytes, 3);
  auto buffer = sim->allocate(bytes);
  buffer.zero_();
  auto timer = sim->start_transfer_timer();
  sim->copy_to_device(buffer, 0, src.data(), bytes, true);
  timer->stop();
  auto fence = sim->fence_uploads();
  EXPECT_FALSE(fence->done()) << "copy_to_device returned before the link finished";
  auto waited = sim->wait_for(fence);
  EXPECT_TRUE(fence->done());
  EXPECT_EQ(buffer[bytes - 1].item<int>(), 3);
  EXPECT_GE(timer->seconds(), 0.04) << "paced at 0.5 GB/s";
  EXPECT_GT(waited->seconds(), 0.0) << "compute waited for the copy: exposed";
  // A fence already passed costs compute nothing.
  EXPECT_EQ(sim->wait_for(fence)->seconds() < 0.01, true);
  // A copy keeps its destination alive: dropping the buffer at once is safe.
  auto other = sim->allocate(bytes);
  sim->copy_to_device(other, 0, src.data(), bytes, true);
  other = torch::Tensor();
  sim->synchronize();
  EXPECT_EQ(sim->memory_stats().allocated_bytes, bytes)
      << "the second buffer was freed after its copy";
}

TEST(Placeholder, AnyComputationFailsLoudlyButShapeRemains) {
  auto w = torch::randn({3, 4});
  auto p = make_unusable_placeholder(w);
  EXPECT_TRUE(is_unusable_placeholder(p));
  EXPECT_EQ(p.sizes(), w.sizes());
  EXPECT_EQ(p.scalar_type(), w.scalar_type());
  auto x = torch::randn({2, 4});
  EXPECT_THROW(torch::matmul(x, p.t()), c10::Error);
  EXPECT_THROW(x.slice(1, 0, 3) + p[0].slice(0, 0, 3), c10::Error);
  EXPECT_THROW(torch::embedding(p, torch::tensor({0, 1})), c10::Error);
  EXPECT_THROW(p.sum(), c10::Error);
}
