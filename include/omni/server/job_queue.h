// JobQueue: the one thread that owns the engine, and a bounded queue in front
// of it.
//
// Note [One engine thread]
// omni::Omni is driven by one thread at a time, and a request holds the whole
// accelerator, so the server runs one request at a time on a worker thread
// that creates the engine, runs every job with torch::InferenceMode set on
// that thread, and destroys the engine. HTTP threads never touch the engine:
// they submit jobs and wait for (or poll) their results. The queue is bounded
// (--max-queue jobs waiting, not counting the running one) so that overload
// becomes an immediate 503 instead of unbounded latency and memory.
//
// Shutdown (SIGINT/SIGTERM, Server::run): close() refuses new jobs while the
// queued ones still run (the drain); abort() ends the drain: it drops the
// queued jobs, each told why, and cancels the running one at its next step
// (cancellation.h).
//
// Note [Phase-batched scheduling]
// A job may carry a BatchPart: a resolved generation request, the key under
// which it may share an engine run (Pipeline::batch_key), its progress
// callback and what to do with its outcome. When the worker takes such a
// job it also takes the queued jobs with the same key, oldest first, up to
// --max-batch in all, and waits at most --batch-wait-ms for more to arrive
// while the batch is not full; then it runs them with one
// Omni::generate_batch (Note [Batched generation], omni.h), so each expert
// is uploaded once for the whole batch. Jobs of the same key may so pass
// older jobs of another shape; those wait at most one batch longer.
// Every job of a running batch is "running": cancel(id) reaches it through
// its own cancellation (it is discarded, the others go on), abort() cancels
// them all. Before a run the worker tells the engine which batchable job is
// next in the queue (Omni::set_lookahead), so its encoder can be
// prefetched while the current run decodes.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "omni/omni.h"
#include "omni/server/cancellation.h"

namespace omni::server {

// What makes a job batchable (Note [Phase-batched scheduling]).
struct BatchPart {
  std::string key;                       // Pipeline::batch_key of the request; empty: runs alone
  pipelines::GenerationRequest request;  // resolved
  // Called after every step of the run; should throw Cancelled once the job
  // is cancelled (cancellation->throw_if_cancelled()).
  pipelines::ProgressFn progress;
  // Called on the worker right before the run (marks the job started); may be empty.
  std::function<void()> start;
  // The job's outcome, on the worker thread; should not throw.
  std::function<void(Omni&, BatchOutcome)> finish;
};

struct Job {
  std::string id;  // for cancel(); may be empty
  // Runs on the worker thread. Should not throw; an exception that escapes is
  // logged and swallowed so the worker keeps serving. Its progress callback
  // should call cancellation->throw_if_cancelled().
  // Unused when `batch` is set: the worker runs the request and calls finish.
  std::function<void(Omni&)> run;
  std::optional<BatchPart> batch;
  // Called instead of run when the job will never run (cancelled while
  // queued, or dropped by abort()); on whichever thread does that. May be empty.
  std::function<void(std::string_view reason)> drop;
  // Shared with whoever may stop the job; never null.
  std::shared_ptr<Cancellation> cancellation = std::make_shared<Cancellation>();
};

enum class SubmitResult { accepted, full, stopped };

struct BatchOptions {
  std::size_t max_batch = 1;          // jobs per engine run; 1: no batching
  std::chrono::milliseconds wait{0};  // for more jobs of the same key
};

struct QueueStats {
  std::size_t queued = 0;
  std::size_t capacity = 0;
  bool running = false;
  std::size_t running_jobs = 0;  // more than 1 while a batch runs
  bool stopping = false;
};

class JobQueue {
 public:
  using EngineFactory = std::function<std::unique_ptr<Omni>()>;
  using Observer = std::function<void(Omni&)>;

  // Starts the worker, which creates the engine with `factory`; blocks until it
  // is loaded and rethrows the factory's exception (the worker is then gone).
  // `on_loaded` runs on the worker right after loading (to publish figures
  // that only the engine's thread may read).
  JobQueue(EngineFactory factory, std::size_t capacity, Observer on_loaded = {},
           BatchOptions batching = {});
  // shutdown(), then joins the worker.
  ~JobQueue();
  JobQueue(const JobQueue&) = delete;
  JobQueue& operator=(const JobQueue&) = delete;

  // Thread-safe, never blocks on the engine.
  SubmitResult submit(Job job);
  // A queued job with this id is removed and dropped; the running one is
  // cancelled (it stops at its next step). False when neither. Thread-safe.
  bool cancel(const std::string& id, CancelReason reason);
  QueueStats stats() const;

  // Stops accepting; queued jobs still run. Returns at once. Idempotent;
  // thread-safe.
  void close();
  // close(), drops every queued job with `reason` and cancels the running
  // one. Returns at once. Thread-safe.
  void abort(CancelReason reason);
  // Waits until nothing is queued or running, at most `timeout`; whether it got there.
  bool wait_idle(std::chrono::milliseconds timeout);
  // close(), then waits until the worker ran every queued job and destroyed
  // the engine. Idempotent; thread-safe.
  void shutdown();

 private:
  void worker_main(EngineFactory factory, Observer on_loaded, std::promise<void> loaded);
  // Takes the next job and, for a batchable one, the queued jobs that join
  // it (Note [Phase-batched scheduling]); marks them running. Empty when
  // stopping and drained.
  std::vector<Job> take_jobs();
  void run_jobs(Omni& engine, std::vector<Job>& jobs);

  const std::size_t capacity_;
  const BatchOptions batching_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable idle_;
  std::deque<Job> queue_;
  struct Running {
    std::string id;
    std::shared_ptr<Cancellation> cancellation;
  };
  std::vector<Running> running_;  // the job, or the batch, on the worker
  bool stopping_ = false;
  std::mutex join_mutex_;
  std::thread worker_;
};

}  // namespace omni::server
