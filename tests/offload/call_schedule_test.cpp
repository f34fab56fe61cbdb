// The call schedule the offload backend plans from (call_schedule.h).
#include "omni/offload/call_schedule.h"

#include <gtest/gtest.h>

using omni::offload::CallSchedule;

namespace {
const std::vector<std::string> kRequest = {"text_encoder", "transformer", "transformer",
                                           "transformer_2", "vae"};
}

TEST(CallSchedule, PassingACallMovesPastItAndOverTheCallsTheRunSkipped) {
  CallSchedule s;
  s.set(kRequest);
  EXPECT_EQ(s.cursor(), 0u);
  EXPECT_EQ(s.current(), 0u);
  // A prompt cache hit: the encoder never runs.
  ASSERT_TRUE(s.pass("transformer"));
  EXPECT_EQ(s.current(), 1u);
  EXPECT_EQ(s.name(s.cursor()), "transformer");
  ASSERT_TRUE(s.pass("transformer"));
  EXPECT_EQ(s.current(), 2u);
  ASSERT_TRUE(s.pass("vae"));
  EXPECT_EQ(s.cursor(), 5u);
  EXPECT_EQ(s.size(), 5u);
}

TEST(CallSchedule, ACallItDoesNotHaveDropsIt) {
  CallSchedule s;
  s.set(kRequest);
  ASSERT_TRUE(s.pass("transformer_2"));
  EXPECT_FALSE(s.pass("transformer")) << "only calls after the cursor count";
  EXPECT_TRUE(s.empty());
  EXPECT_EQ(s.current(), 0u);
  EXPECT_FALSE(s.pass("vae"));
}

TEST(CallSchedule, QueuedCallsFollowTheRequestsAndAreTheNextRequests) {
  CallSchedule s;
  s.set(kRequest);
  s.append({"text_encoder", "transformer"});
  EXPECT_EQ(s.size(), 7u);
  EXPECT_FALSE(s.for_next_request(4));  // "vae" is this request's
  EXPECT_EQ(s.name(5), "text_encoder");
  EXPECT_TRUE(s.for_next_request(5));
  // Appended later, the calls already passed are dropped first.
  ASSERT_TRUE(s.pass("transformer_2"));
  s.append({"vae"});
  EXPECT_EQ(s.size(), 4u);
  EXPECT_EQ(s.cursor(), 0u);
  EXPECT_EQ(s.name(0), "vae");
  EXPECT_FALSE(s.for_next_request(0));
  EXPECT_TRUE(s.for_next_request(1));
  // The next request's own schedule starts afresh.
  s.set({"text_encoder", "vae"});
  EXPECT_EQ(s.cursor(), 0u);
  EXPECT_FALSE(s.for_next_request(1));
}
