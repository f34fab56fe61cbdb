// Requests as jobs on the engine's thread (private to src/server;
// Note [One engine thread], job_queue.h).
#pragma once

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <string>

#include "http_server.h"
#include "omni/error.h"
#include "omni/server/cancellation.h"
#include "service.h"

namespace omni::server {

// Publishes the engine's offload figures; engine thread. Jobs do it before
// they deliver their result, so a client that got its answer finds the
// figures of its request in its next /metrics.
void publish_figures(Service& s, Omni& engine) noexcept;

// 503 (with Retry-After) when the queue refused a job.
void throw_unless_accepted(const Service& s, SubmitResult submitted);

// A progress callback that stops the request at its next step once it is cancelled.
pipelines::ProgressFn cancel_at_next_step(std::shared_ptr<const Cancellation> cancellation);

// Counts a finished generation (its outcome from the exception it ended
// with, null for ok) and publishes the engine's figures. Engine thread.
void count_generation(Service& s, Omni& engine, const std::string& kind, std::exception_ptr error,
                      double seconds) noexcept;

// Waits on the calling HTTP thread for the result of job `id`. While it
// waits it watches the client's connection: a client that went away cancels
// its request (dropped while queued, stopped at its next step while running,
// discarded when it runs in a batch: Note [Batched generation]).
template <typename T>
T wait_for_job(Service& s, const std::string& id, std::future<T>& result) {
  Connection* connection = Connection::current();
  while (result.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
    if (connection != nullptr && connection->peer_gone()) {
      s.queue->cancel(id, CancelReason::client_disconnected);
      connection->close_after_response();
      throw Cancelled(std::string(describe(CancelReason::client_disconnected)));
    }
  }
  return result.get();
}

// Submits `work` and waits for its result on the calling HTTP thread
// (wait_for_job). Exceptions of `work` are rethrown here; ApiError
// overloaded when the queue is full or the server is stopping.
template <typename T>
T run_on_engine(Service& s, const std::string& kind,
                std::function<T(Omni&, const pipelines::ProgressFn&)> work) {
  using Clock = std::chrono::steady_clock;
  auto promise = std::make_shared<std::promise<T>>();
  auto result = promise->get_future();
  Job job;
  job.id = "request-" + std::to_string(++s.next_request);
  const std::string id = job.id;
  job.run = [&s, kind, promise, cancellation = job.cancellation,
             work = std::move(work)](Omni& engine) {
    const auto start = Clock::now();
    auto seconds = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
    try {
      T value = work(engine, cancel_at_next_step(cancellation));
      count_generation(s, engine, kind, nullptr, seconds());
      promise->set_value(std::move(value));
    } catch (...) {
      count_generation(s, engine, kind, std::current_exception(), seconds());
      promise->set_exception(std::current_exception());
    }
  };
  job.drop = [promise](std::string_view reason) {
    promise->set_exception(std::make_exception_ptr(Cancelled(std::string(reason))));
  };
  throw_unless_accepted(s, s.queue->submit(std::move(job)));
  return wait_for_job(s, id, result);
}

// The batch key of a resolved request (Pipeline::batch_key; empty: it runs
// alone), on an HTTP thread (Note [Resolve off the engine thread]).
std::string batch_key(const Service& s, const pipelines::GenerationRequest& request);

// One resolved generation request as a job that may run in a batch with
// others of its shape (Note [Phase-batched scheduling]); waits for it like
// run_on_engine. `encode` turns its result into the answer on the engine's
// thread.
template <typename T>
T run_generation_on_engine(Service& s, const std::string& kind,
                           const pipelines::GenerationRequest& request,
                           std::function<T(const GenerateResult&)> encode) {
  auto promise = std::make_shared<std::promise<T>>();
  auto result = promise->get_future();
  Job job;
  job.id = "request-" + std::to_string(++s.next_request);
  const std::string id = job.id;
  BatchPart part;
  part.key = batch_key(s, request);
  part.request = request;
  part.progress = cancel_at_next_step(job.cancellation);
  part.finish = [&s, kind, promise, encode = std::move(encode)](Omni& engine,
                                                                BatchOutcome outcome) {
    try {
      if (outcome.error) std::rethrow_exception(outcome.error);
      T value = encode(outcome.result);
      count_generation(s, engine, kind, nullptr, outcome.seconds);
      promise->set_value(std::move(value));
    } catch (...) {
      count_generation(s, engine, kind, std::current_exception(), outcome.seconds);
      promise->set_exception(std::current_exception());
    }
  };
  job.batch = std::move(part);
  job.drop = [promise](std::string_view reason) {
    promise->set_exception(std::make_exception_ptr(Cancelled(std::string(reason))));
  };
  throw_unless_accepted(s, s.queue->submit(std::move(job)));
  return wait_for_job(s, id, result);
}

// Queues an asynchronous video job for `request` (resolved) under a new
// record; returns the record as queued. ApiError overloaded when the queue
// refused it (the record is then gone).
VideoJob submit_video_job(Service& s, const pipelines::GenerationRequest& request, VideoJob record);

}  // namespace omni::server
