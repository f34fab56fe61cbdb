// Unit tests of the video job store's lifecycle and bounds (video_jobs.h).
#include "omni/server/video_jobs.h"

#include <gtest/gtest.h>

namespace omni::server {
namespace {

using namespace std::chrono_literals;

struct FakeClock {
  std::chrono::steady_clock::time_point now{};
  VideoJobStore::Clock fn() {
    return [this] { return now; };
  }
};

TEST(VideoJobStore, Lifecycle) {
  FakeClock clock;
  VideoJobStore store(60s, 8, clock.fn());
  VideoJob job;
  job.size = "32x32";
  job.num_frames = 5;
  job.fps = 8;
  const auto id = store.create(job);
  EXPECT_EQ(id.rfind("video_", 0), 0u);
  EXPECT_EQ(id.size(), 6u + 32u);
  EXPECT_EQ(store.get(id)->status, JobStatus::queued);
  EXPECT_TRUE(store.start(id));
  EXPECT_TRUE(store.set_progress(id, 50));
  EXPECT_EQ(store.get(id)->status, JobStatus::in_progress);
  EXPECT_EQ(store.get(id)->progress, 50);
  EXPECT_TRUE(store.complete(id, "mp4 bytes"));
  const auto done = store.get(id);
  EXPECT_EQ(done->status, JobStatus::completed);
  EXPECT_EQ(done->progress, 100);
  EXPECT_EQ(*done->mp4, "mp4 bytes");
  const auto json = done->to_json(60);
  EXPECT_EQ(json["object"], "video");
  EXPECT_EQ(json["status"], "completed");
  EXPECT_EQ(json["expires_at"].get<std::int64_t>(), json["completed_at"].get<std::int64_t>() + 60);
  EXPECT_TRUE(json["error"].is_null());
  EXPECT_TRUE(store.list().front().mp4 == nullptr);  // listings carry no content
  EXPECT_TRUE(store.erase(id));
  EXPECT_FALSE(store.get(id));
  EXPECT_FALSE(store.erase(id));
}

TEST(VideoJobStore, TransitionsOnADeletedJobReportItGone) {
  VideoJobStore store(60s, 8);
  const auto id = store.create({});
  EXPECT_TRUE(store.erase(id));
  EXPECT_FALSE(store.start(id));
  EXPECT_FALSE(store.set_progress(id, 10));
  EXPECT_FALSE(store.complete(id, "x"));
  EXPECT_FALSE(store.fail(id, "c", "m"));
}

TEST(VideoJobStore, FailedJobsCarryTheirError) {
  VideoJobStore store(60s, 8);
  const auto id = store.create({});
  store.start(id);
  store.fail(id, "invalid_value", "width must be a multiple of 16");
  const auto json = store.get(id)->to_json(60);
  EXPECT_EQ(json["status"], "failed");
  EXPECT_EQ(json["error"]["code"], "invalid_value");
  EXPECT_EQ(json["error"]["message"], "width must be a multiple of 16");
}

TEST(VideoJobStore, FinishedJobsExpireAfterTheTtl) {
  FakeClock clock;
  VideoJobStore store(10s, 8, clock.fn());
  const auto finished = store.create({});
  const auto waiting = store.create({});
  store.complete(finished, "x");
  clock.now += 9s;
  EXPECT_TRUE(store.get(finished));
  clock.now += 1s;
  EXPECT_FALSE(store.get(finished));
  EXPECT_TRUE(store.get(waiting));  // unfinished jobs never expire
}

TEST(VideoJobStore, AtMostMaxFinishedAreKeptOldestGoFirst) {
  FakeClock clock;
  VideoJobStore store(3600s, 2, clock.fn());
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) {
    ids.push_back(store.create({}));
    clock.now += 1s;
    store.complete(ids.back(), "x");
  }
  const auto queued = store.create({});
  EXPECT_FALSE(store.get(ids[0]));
  EXPECT_FALSE(store.get(ids[1]));
  EXPECT_TRUE(store.get(ids[2]));
  EXPECT_TRUE(store.get(ids[3]));
  EXPECT_TRUE(store.get(queued));
  const auto list = store.list();
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list[0].id, queued);  // newest first
  EXPECT_EQ(list[2].id, ids[2]);
}

// Note [Jobs finished while draining]: what the drain waits for.
TEST(VideoJobStore, JobsFinishedWhileDrainingAwaitTheirFetch) {
  FakeClock clock;
  VideoJobStore store(3600s, 8, clock.fn());
  const auto before = store.create({});
  store.complete(before, "x");
  const auto completes = store.create({});
  const auto fails = store.create({});
  const auto deleted = store.create({});
  EXPECT_EQ(store.awaiting_fetch(), 0u);  // no drain yet
  clock.now += 1s;
  store.begin_drain();
  EXPECT_EQ(store.awaiting_fetch(), 0u);  // `before` finished earlier; the rest run
  store.complete(completes, "mp4");
  store.fail(fails, "cancelled", "x");
  store.complete(deleted, "mp4");
  EXPECT_EQ(store.awaiting_fetch(), 3u);
  store.erase(deleted);
  store.mark_fetched(completes);
  EXPECT_EQ(store.awaiting_fetch(), 1u);
  store.mark_fetched(fails);
  EXPECT_EQ(store.awaiting_fetch(), 0u);
  EXPECT_TRUE(store.get(completes));  // fetched records stay until the TTL
}

}  // namespace
}  // namespace omni::server
