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

// Submits `work` and waits for its result on the calling HTTP thread. While
// it waits it watches the client's connection: a client that went away
// cancels its request (dropped while queued, stopped at its next step while
// running). Exceptions of `work` are rethrown here; ApiError overloaded when
// the queue is full or the server is stopping.
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
      s.metrics.observe_generation(kind, GenerationOutcome::ok, seconds());
      publish_figures(s, engine);
      promise->set_value(std::move(value));
    } catch (const Cancelled&) {
      s.metrics.observe_generation(kind, GenerationOutcome::cancelled, seconds());
      publish_figures(s, engine);
      promise->set_exception(std::current_exception());
    } catch (...) {
      s.metrics.observe_generation(kind, GenerationOutcome::error, seconds());
      publish_figures(s, engine);
      promise->set_exception(std::current_exception());
    }
  };
  job.drop = [promise](std::string_view reason) {
    promise->set_exception(std::make_exception_ptr(Cancelled(std::string(reason))));
  };
  throw_unless_accepted(s, s.queue->submit(std::move(job)));
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

// Queues an asynchronous video job for `request` (resolved) under a new
// record; returns the record as queued. ApiError overloaded when the queue
// refused it (the record is then gone).
VideoJob submit_video_job(Service& s, const pipelines::GenerationRequest& request, VideoJob record);

}  // namespace omni::server
