// Unit tests of the engine thread and its bounded queue (job_queue.h), with
// the built-in example engine in this process.
#include "omni/server/job_queue.h"

#include <gtest/gtest.h>

#include <c10/core/InferenceMode.h>

#include <atomic>
#include <future>
#include <map>
#include <mutex>
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

// A one-frame 16x16 request of `steps` steps.
pipelines::GenerationRequest tiny_request(int steps = 1) {
  pipelines::GenerationRequest r;
  r.prompt = "a red circle";
  r.steps = steps;
  r.width = 16;
  r.height = 16;
  r.num_frames = 1;
  return r;
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
    EXPECT_EQ(engine.generate(tiny_request()).frames.sizes(),
              (std::vector<std::int64_t>{1, 16, 16, 3}));
    seen.set_value({std::this_thread::get_id(), c10::InferenceMode::is_enabled()});
  };
  ASSERT_EQ(queue.submit(std::move(job)), SubmitResult::accepted);
  const auto [thread, inference] = seen.get_future().get();
  EXPECT_NE(thread, std::this_thread::get_id());
  EXPECT_TRUE(inference);
  queue.shutdown();
  EXPECT_EQ(observed, 1);  // only then
}

// Records what ran and what was dropped (and why), for the tests below.
struct Ledger {
  std::atomic<int> ran{0};
  std::mutex mutex;
  std::vector<std::string> dropped;

  Job job(std::string id) {
    Job j;
    j.id = std::move(id);
    j.run = [this](Omni&) { ++ran; };
    j.drop = [this, name = j.id](std::string_view reason) {
      std::lock_guard lock(mutex);
      dropped.push_back(name + ": " + std::string(reason));
    };
    return j;
  }
};

TEST(JobQueue, BoundedCancellableAndDrainingOnShutdown) {
  JobQueue queue(example_engine(), 2);
  std::promise<void> started, release;
  std::shared_future<void> released = release.get_future().share();
  ASSERT_EQ(queue.submit(blocking_job(started, released)), SubmitResult::accepted);
  started.get_future().wait();  // running: the queue itself is empty again
  EXPECT_TRUE(queue.stats().running);

  Ledger ledger;
  ASSERT_EQ(queue.submit(ledger.job("cancelled")), SubmitResult::accepted);
  ASSERT_EQ(queue.submit(ledger.job("async")), SubmitResult::accepted);
  EXPECT_EQ(queue.submit(ledger.job("third")), SubmitResult::full);
  EXPECT_EQ(queue.stats().queued, 2u);

  EXPECT_TRUE(queue.cancel("cancelled", CancelReason::deleted));
  EXPECT_FALSE(queue.cancel("cancelled", CancelReason::deleted));
  ASSERT_EQ(queue.submit(ledger.job("waited-for")), SubmitResult::accepted);

  queue.close();  // as on SIGTERM: nothing new, but what is queued still runs (the drain)
  EXPECT_EQ(queue.submit(ledger.job("late")), SubmitResult::stopped);
  EXPECT_FALSE(queue.wait_idle(50ms));  // the blocking job still runs
  release.set_value();
  EXPECT_TRUE(queue.wait_idle(60s));
  queue.shutdown();
  EXPECT_EQ(ledger.ran, 2);  // async, waited-for
  EXPECT_EQ(ledger.dropped, (std::vector<std::string>{"cancelled: the video job was deleted"}));
}

// Past --shutdown-timeout: the running job is cancelled, every queued one is
// dropped with the reason (the regression: queued async jobs vanished silently).
TEST(JobQueue, AbortCancelsTheRunningJobAndDropsTheQueuedOnes) {
  JobQueue queue(example_engine(), 4);
  std::promise<void> started;
  std::atomic<bool> saw_cancel{false};
  Job running;
  running.id = "running";
  running.run = [&, cancellation = running.cancellation](Omni&) {
    started.set_value();
    // A generation checks at every step; this one checks until it is told.
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    while (!cancellation->cancelled() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(1ms);
    saw_cancel = cancellation->reason() == CancelReason::shutdown;
  };
  ASSERT_EQ(queue.submit(std::move(running)), SubmitResult::accepted);
  started.get_future().wait();
  Ledger ledger;
  ASSERT_EQ(queue.submit(ledger.job("a")), SubmitResult::accepted);
  ASSERT_EQ(queue.submit(ledger.job("b")), SubmitResult::accepted);
  queue.abort(CancelReason::shutdown);
  EXPECT_TRUE(queue.wait_idle(60s));
  EXPECT_TRUE(saw_cancel);
  EXPECT_EQ(ledger.ran, 0);
  const std::string reason(describe(CancelReason::shutdown));
  EXPECT_EQ(ledger.dropped, (std::vector<std::string>{"a: " + reason, "b: " + reason}));
  EXPECT_EQ(queue.submit(ledger.job("late")), SubmitResult::stopped);
}

TEST(JobQueue, CancellingTheRunningJobByIdReachesItsProgressCheck) {
  JobQueue queue(example_engine(), 2);
  std::promise<std::string> outcome;
  std::promise<void> started;
  Job job;
  job.id = "request-1";
  job.run = [&, cancellation = job.cancellation](Omni& engine) {
    try {
      // 1000 steps: far longer than the test waits.
      engine.generate(tiny_request(1000), [&](int step, int) {
        if (step == 1) started.set_value();
        cancellation->throw_if_cancelled();
      });
      outcome.set_value("finished");
    } catch (const Cancelled& e) {
      outcome.set_value(e.what());
    }
  };
  ASSERT_EQ(queue.submit(std::move(job)), SubmitResult::accepted);
  started.get_future().wait();
  EXPECT_TRUE(queue.cancel("request-1", CancelReason::client_disconnected));
  auto result = outcome.get_future();
  ASSERT_EQ(result.wait_for(60s), std::future_status::ready);
  EXPECT_EQ(result.get(), describe(CancelReason::client_disconnected));
  // The engine stays usable.
  std::promise<void> next;
  Job after;
  after.run = [&](Omni& engine) {
    engine.generate(tiny_request());
    next.set_value();
  };
  ASSERT_EQ(queue.submit(std::move(after)), SubmitResult::accepted);
  EXPECT_EQ(next.get_future().wait_for(60s), std::future_status::ready);
}

// Note [Cancel points inside a step]: the queue installs a check on the
// engine thread, so a running job stops at the models' next cancel point
// even when nothing between its steps looks (no progress callback here).
TEST(JobQueue, CancellingTheRunningJobStopsItInsideAStep) {
  JobQueue queue(example_engine(), 2);
  std::promise<std::string> outcome;
  std::promise<void> started;
  Job job;
  job.id = "request-1";
  job.run = [&](Omni& engine) {
    try {
      started.set_value();
      (void)engine.generate(tiny_request(1000));  // far longer than the test waits
      outcome.set_value("finished");
    } catch (const Cancelled& e) {
      outcome.set_value(e.what());
    }
  };
  ASSERT_EQ(queue.submit(std::move(job)), SubmitResult::accepted);
  started.get_future().wait();
  EXPECT_TRUE(queue.cancel("request-1", CancelReason::deleted));
  auto result = outcome.get_future();
  ASSERT_EQ(result.wait_for(60s), std::future_status::ready);
  EXPECT_EQ(result.get(), describe(CancelReason::deleted));
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

// ---- Note [Phase-batched scheduling] ---------------------------------------

// What the batchable jobs below saw: per job id, the batch it ran in (its
// size) or the error it ended with.
struct BatchRecorder {
  std::mutex mutex;
  std::map<std::string, std::string> seen;
  std::atomic<int> finished{0};

  Job job(const std::string& id, int steps, pipelines::ProgressFn progress = {}) {
    Job j;
    j.id = id;
    BatchPart part;
    part.request = tiny_request(steps);
    part.key = "steps=" + std::to_string(steps);
    part.progress = std::move(progress);
    part.finish = [this, id](Omni&, BatchOutcome outcome) {
      std::string what;
      if (outcome.error) {
        try {
          std::rethrow_exception(outcome.error);
        } catch (const std::exception& e) {
          what = std::string("error: ") + e.what();
        }
      } else {
        what = "batch of " + std::to_string(outcome.result.batch_size);
      }
      std::lock_guard lock(mutex);
      seen[id] = what;
      ++finished;
    };
    j.batch = std::move(part);
    return j;
  }
  std::string of(const std::string& id) {
    std::lock_guard lock(mutex);
    return seen.count(id) ? seen[id] : "not finished";
  }
};

// Keeps the worker busy until the returned promise is set, so that the jobs
// submitted meanwhile queue up.
std::shared_ptr<std::promise<void>> hold_the_worker(JobQueue& queue) {
  auto started = std::make_shared<std::promise<void>>();
  auto release = std::make_shared<std::promise<void>>();
  Job job;
  job.run = [started, released = release->get_future().share()](Omni&) {
    started->set_value();
    released.wait();
  };
  EXPECT_EQ(queue.submit(std::move(job)), SubmitResult::accepted);
  started->get_future().wait();
  return release;
}

// Queues (id, steps) jobs while the worker is busy, then lets them run;
// what each saw (BatchRecorder), in the order given.
std::vector<std::string> run_queued_batchable_jobs(
    std::size_t max_batch, const std::vector<std::pair<std::string, int>>& jobs) {
  JobQueue queue(example_engine(), 8, {}, BatchOptions{max_batch, 0ms});
  auto release = hold_the_worker(queue);
  BatchRecorder recorder;
  for (const auto& [id, steps] : jobs)
    EXPECT_EQ(queue.submit(recorder.job(id, steps)), SubmitResult::accepted);
  release->set_value();
  EXPECT_TRUE(queue.wait_idle(120s));
  std::vector<std::string> seen;
  for (const auto& job : jobs) seen.push_back(recorder.of(job.first));
  return seen;
}

TEST(JobQueue, QueuedJobsOfOneShapeRunAsOneBatchUpToMaxBatch) {
  // Four of one shape (1 step), one of another in between. a3 passes b1 to
  // join the head's batch; a4 is past --max-batch 3.
  const auto seen =
      run_queued_batchable_jobs(3, {{"a1", 1}, {"a2", 1}, {"b1", 2}, {"a3", 1}, {"a4", 1}});
  EXPECT_EQ(seen, (std::vector<std::string>{"batch of 3", "batch of 3", "batch of 1", "batch of 3",
                                            "batch of 1"}));
}

TEST(JobQueue, MaxBatchOneRunsEveryJobAlone) {
  EXPECT_EQ(run_queued_batchable_jobs(1, {{"a1", 1}, {"a2", 1}}),
            (std::vector<std::string>{"batch of 1", "batch of 1"}));
}

// --batch-wait-ms: a lone job waits that long for company of its shape.
TEST(JobQueue, ABatchWaitsForLateJobsOfItsShape) {
  for (const auto wait : {0ms, 5000ms}) {
    SCOPED_TRACE(wait.count());
    JobQueue queue(example_engine(), 8, {}, BatchOptions{2, wait});
    BatchRecorder recorder;
    ASSERT_EQ(queue.submit(recorder.job("first", 2)), SubmitResult::accepted);
    std::this_thread::sleep_for(200ms);
    ASSERT_EQ(queue.submit(recorder.job("late", 2)), SubmitResult::accepted);
    ASSERT_TRUE(queue.wait_idle(120s));
    EXPECT_EQ(recorder.of("late"), wait.count() > 0 ? "batch of 2" : "batch of 1");
  }
}

// Cancelling one job of a running batch by id reaches that job only.
TEST(JobQueue, CancellingOneJobOfABatchLeavesTheOthers) {
  JobQueue queue(example_engine(), 8, {}, BatchOptions{3, 0ms});
  auto release = hold_the_worker(queue);
  BatchRecorder recorder;
  std::vector<std::shared_ptr<Cancellation>> cancellations;
  for (const char* id : {"keep-1", "gone", "keep-2"}) {
    auto job = recorder.job(id, 4);
    auto cancellation = job.cancellation;
    job.batch->progress = [&queue, cancellation, id = std::string(id)](int step, int) {
      if (id == "keep-1" && step == 1) queue.cancel("gone", CancelReason::client_disconnected);
      cancellation->throw_if_cancelled();
    };
    ASSERT_EQ(queue.submit(std::move(job)), SubmitResult::accepted);
  }
  release->set_value();
  ASSERT_TRUE(queue.wait_idle(120s));
  EXPECT_EQ(recorder.of("keep-1"), "batch of 3");
  EXPECT_EQ(recorder.of("keep-2"), "batch of 3");
  EXPECT_EQ(recorder.of("gone"),
            "error: " + std::string(describe(CancelReason::client_disconnected)));
}

}  // namespace
}  // namespace omni::server
