// Unit tests of the engine thread and its bounded queue (job_queue.h), with
// the built-in example engine in this process.
#include "omni/server/job_queue.h"

#include <gtest/gtest.h>

#include <c10/core/InferenceMode.h>

#include <atomic>
#include <future>
#include <thread>

#include "omni/error.h"

namespace omni::server {
namespace {

using namespace std::chrono_literals;

JobQueue::EngineFactory example_engine() {
  return [] {
    EngineArgs args;
    args.enable_cpu_offload = true;
    args.device = "sim";
    return std::make_unique<Omni>(args);
  };
}

// A job that blocks the worker until `release` is set.
Job blocking_job(std::promise<void>& started, std::shared_future<void> release) {
  Job job;
  job.run = [&started, release](Omni&) {
    started.set_value();
    release.wait();
  };
  return job;
}

TEST(JobQueue, RunsJobsOnOneThreadInInferenceMode) {
  std::atomic<int> observed{0};
  JobQueue queue(example_engine(), 4, [&](Omni&) { ++observed; });
  EXPECT_EQ(observed, 1);  // after loading
  std::promise<std::pair<std::thread::id, bool>> seen;
  Job job;
  job.run = [&](Omni& engine) {
    pipelines::GenerationRequest r;
    r.prompt = "a red circle";
    r.steps = 1;
    r.width = 16;
    r.height = 16;
    r.num_frames = 1;
    EXPECT_EQ(engine.generate(r).frames.sizes(), (std::vector<std::int64_t>{1, 16, 16, 3}));
    seen.set_value({std::this_thread::get_id(), c10::InferenceMode::is_enabled()});
  };
  ASSERT_EQ(queue.submit(std::move(job)), SubmitResult::accepted);
  const auto [thread, inference] = seen.get_future().get();
  EXPECT_NE(thread, std::this_thread::get_id());
  EXPECT_TRUE(inference);
  queue.shutdown();
  EXPECT_EQ(observed, 1);  // only then
}

TEST(JobQueue, BoundedCancellableAndDrainingOnShutdown) {
  JobQueue queue(example_engine(), 2);
  std::promise<void> started, release;
  std::shared_future<void> released = release.get_future().share();
  ASSERT_EQ(queue.submit(blocking_job(started, released)), SubmitResult::accepted);
  started.get_future().wait();  // running: the queue itself is empty again
  EXPECT_TRUE(queue.stats().running);

  std::atomic<int> ran{0};
  std::vector<std::string> dropped;
  std::mutex dropped_mutex;
  auto job = [&](std::string id, bool drain) {
    Job j;
    j.id = std::move(id);
    j.drain = drain;
    j.run = [&](Omni&) { ++ran; };
    j.drop = [&, name = j.id](std::string_view reason) {
      std::lock_guard lock(dropped_mutex);
      dropped.push_back(name + ": " + std::string(reason));
    };
    return j;
  };
  ASSERT_EQ(queue.submit(job("cancelled", true)), SubmitResult::accepted);
  ASSERT_EQ(queue.submit(job("async", false)), SubmitResult::accepted);
  EXPECT_EQ(queue.submit(job("third", true)), SubmitResult::full);
  EXPECT_EQ(queue.stats().queued, 2u);

  EXPECT_TRUE(queue.cancel("cancelled"));
  EXPECT_FALSE(queue.cancel("cancelled"));
  ASSERT_EQ(queue.submit(job("waited-for", true)), SubmitResult::accepted);

  queue.close();  // as on SIGTERM: the async job goes, the waited-for one stays
  EXPECT_EQ(queue.submit(job("late", true)), SubmitResult::stopped);
  release.set_value();
  queue.shutdown();
  EXPECT_EQ(ran, 1);  // waited-for
  EXPECT_EQ(dropped, (std::vector<std::string>{"cancelled: cancelled",
                                               "async: the server is shutting down"}));
}

TEST(JobQueue, AJobThatThrowsDoesNotStopTheWorker) {
  JobQueue queue(example_engine(), 2);
  Job bad;
  bad.run = [](Omni&) { throw std::runtime_error("boom"); };
  ASSERT_EQ(queue.submit(std::move(bad)), SubmitResult::accepted);
  std::promise<void> done;
  Job good;
  good.run = [&](Omni&) { done.set_value(); };
  ASSERT_EQ(queue.submit(std::move(good)), SubmitResult::accepted);
  EXPECT_EQ(done.get_future().wait_for(60s), std::future_status::ready);
}

TEST(JobQueue, ALoadFailureIsRethrownToTheCaller) {
  EXPECT_THROW(JobQueue([]() -> std::unique_ptr<Omni> { throw ConfigError("no such model"); }, 1),
               ConfigError);
  EngineArgs args;
  args.model = "/nonexistent/model";
  EXPECT_THROW(JobQueue([args] { return std::make_unique<Omni>(args); }, 1), Error);
}

}  // namespace
}  // namespace omni::server
