#include "engine_jobs.h"

#include "generation.h"
#include "http_reply.h"

namespace omni::server {

void publish_figures(Service& s, Omni& engine) noexcept {
  try {
    s.metrics.publish_offload(OffloadFigures::from_report(engine.offload_report()));
    s.metrics.publish_prompt_cache(engine.prompt_cache_stats());
  } catch (const std::exception& e) {
    log_line(std::string("publishing offload figures failed: ") + first_line(e.what()));
  }
}

void count_generation(Service& s, Omni& engine, const std::string& kind, std::exception_ptr error,
                      double seconds) noexcept {
  auto outcome = GenerationOutcome::ok;
  if (error) {
    outcome = GenerationOutcome::error;
    try {
      std::rethrow_exception(error);
    } catch (const Cancelled&) {
      outcome = GenerationOutcome::cancelled;
    } catch (...) {
    }
  }
  s.metrics.observe_generation(kind, outcome, seconds);
  publish_figures(s, engine);
}

std::string batch_key(const Service& s, const pipelines::GenerationRequest& request) {
  return s.pipeline->batch_key(request).value_or("");
}

void throw_unless_accepted(const Service& s, SubmitResult submitted) {
  switch (submitted) {
    case SubmitResult::accepted:
      return;
    case SubmitResult::full:
      throw ApiError(ErrorKind::overloaded, "queue_full",
                     detail::concat("the server is busy: ", s.options.max_queue,
                                    " requests are already waiting; retry later"));
    case SubmitResult::stopped:
      throw ApiError(ErrorKind::overloaded, "shutting_down", "the server is shutting down");
  }
}

pipelines::ProgressFn cancel_at_next_step(std::shared_ptr<const Cancellation> cancellation) {
  return [cancellation = std::move(cancellation)](int, int) { cancellation->throw_if_cancelled(); };
}

VideoJob submit_video_job(Service& s, const pipelines::GenerationRequest& request,
                          VideoJob record) {
  const std::string id = s.videos.create(std::move(record));
  auto queued = s.videos.get(id);  // as queued, before the worker can start it
  OMNI_INTERNAL_ASSERT(queued.has_value(), "a new video job vanished");
  Job job;
  job.id = id;
  BatchPart part;
  part.key = batch_key(s, request);
  part.request = request;
  part.start = [&s, id] { s.videos.start(id); };
  part.progress = [&s, id, cancellation = job.cancellation](int step, int total) {
    const int percent = total > 0 ? std::min(99, 100 * step / total) : 0;
    // A record deleted meanwhile (DELETE raced the cancel) stops the job too.
    if (!s.videos.set_progress(id, percent)) cancellation->cancel(CancelReason::deleted);
    cancellation->throw_if_cancelled();
  };
  part.finish = [&s, id](Omni& engine, BatchOutcome outcome) {
    std::string mp4;
    try {
      if (outcome.error) std::rethrow_exception(outcome.error);
      mp4 = encode_mp4(outcome.result.frames, outcome.result.fps);
    } catch (const Cancelled& e) {
      count_generation(s, engine, "video", std::current_exception(), outcome.seconds);
      if (s.videos.fail(id, "cancelled", e.what()))
        log_line(id + " failed: cancelled: " + e.what());
      return;
    } catch (...) {
      count_generation(s, engine, "video", std::current_exception(), outcome.seconds);
      const ApiError e = translate_current_exception();
      s.videos.fail(id, e.code(), e.what());
      return;
    }
    count_generation(s, engine, "video", nullptr, outcome.seconds);
    s.videos.complete(id, std::move(mp4));
  };
  job.batch = std::move(part);
  job.drop = [&s, id](std::string_view reason) {
    if (s.videos.fail(id, "cancelled", std::string(reason)))
      log_line(id + " failed before it ran: " + std::string(reason));
  };
  const auto submitted = s.queue->submit(std::move(job));
  if (submitted != SubmitResult::accepted) s.videos.erase(id);
  throw_unless_accepted(s, submitted);
  return *std::move(queued);
}

}  // namespace omni::server
