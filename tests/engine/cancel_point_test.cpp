// Note [Cancel points inside a step]: a request stops at the cancel point
// where its check throws, inside the text encoder, a denoising step or the
// decode, on the cpu and under streamed offload on sim; the engine's next
// request is then bitwise what it would have been. On the bundled
// models/tiny-shapes: the real UMT5, Wan DiT and Wan VAE classes.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <vector>

#include "omni/cancel_point.h"
#include "omni/error.h"
#include "omni/io/tokenizer.h"
#include "omni/omni.h"

using namespace omni;

namespace {

EngineArgs engine_args(const std::string& device) {
  EngineArgs args;
  args.model = (std::filesystem::path(OMNI_SOURCE_DIR) / "models" / "tiny-shapes").string();
  args.device = device;
  args.enable_cpu_offload = device == "sim";
  args.offload.quiet = true;
  args.prompt_cache_bytes = 0;  // every request runs its text encoder
  return args;
}

GenerationRequest small_request() {
  GenerationRequest r;
  r.prompt = "a red circle moving right";
  r.negative_prompt = "blurry";
  r.seed = 11;
  r.steps = 2;
  r.width = 64;
  r.height = 64;
  r.num_frames = 5;
  return r;
}

}  // namespace

TEST(CancelPoints, ARequestStopsWhereItsCheckThrowsAndTheNextIsUnaffected) {
  if (!io::Tokenizer::available()) GTEST_SKIP() << "built without OMNI_WITH_TOKENIZER";
  for (const std::string device : {"cpu", "sim"}) {
    SCOPED_TRACE(device);
    Omni omni(engine_args(device));
    const auto reference = omni.generate(small_request()).frames;
    // Where the cancel points of one request fall against its steps.
    int points = 0;
    std::vector<int> after_step;  // cancel points seen when each step ended
    {
      const ScopedCancelCheck count([&] { ++points; });
      (void)omni.generate(small_request(), [&](int, int) { after_step.push_back(points); });
    }
    ASSERT_EQ(after_step.size(), 2u);
    EXPECT_GT(after_step[0], 2) << "the encoder and the first step have cancel points";
    EXPECT_GT(after_step[1] - after_step[0], 1) << "a step has cancel points of its own";
    EXPECT_GT(points - after_step[1], 1) << "the decode has cancel points";

    std::vector<int> stops{1,
                           after_step[0] / 2,
                           after_step[0] + 1,
                           (after_step[0] + after_step[1]) / 2,
                           after_step[1] + 1,
                           points};
    for (const int n : stops) {
      int seen = 0, steps_ended = 0;
      {
        const ScopedCancelCheck stop([&] {
          if (++seen == n) throw Cancelled("cancelled at point " + std::to_string(n));
        });
        EXPECT_THROW((void)omni.generate(small_request(), [&](int, int) { ++steps_ended; }),
                     Cancelled)
            << "point " << n;
      }
      EXPECT_EQ(seen, n) << "nothing ran past the point that threw";
      EXPECT_EQ(steps_ended,
                std::count_if(after_step.begin(), after_step.end(), [&](int a) { return a < n; }))
          << "point " << n;
      EXPECT_TRUE(torch::equal(omni.generate(small_request()).frames, reference)) << "point " << n;
    }
  }
}

// A check that does not throw changes nothing, and none is installed
// outside its scope.
TEST(CancelPoints, AQuietCheckChangesNothingAndEndsWithItsScope) {
  if (!io::Tokenizer::available()) GTEST_SKIP() << "built without OMNI_WITH_TOKENIZER";
  Omni omni(engine_args("cpu"));
  const auto reference = omni.generate(small_request()).frames;
  int outer = 0, inner = 0;
  {
    const ScopedCancelCheck a([&] { ++outer; });
    {
      const ScopedCancelCheck b([&] { ++inner; });
      EXPECT_TRUE(torch::equal(omni.generate(small_request()).frames, reference));
    }
    EXPECT_GT(inner, 0);
    EXPECT_EQ(outer, 0) << "the innermost check runs alone";
    (void)omni.generate(small_request());
    EXPECT_GT(outer, 0);
  }
  const int before = outer;
  (void)omni.generate(small_request());
  EXPECT_EQ(outer, before) << "no check outside its scope";
}
