#include "engine_jobs.h"

#include "generation.h"
#include "http_reply.h"

namespace omni::server {

namespace {

using Clock = std::chrono::steady_clock;

void run_video_job(Service& s, const std::string& id, const pipelines::GenerationRequest& request,
                   const std::shared_ptr<Cancellation>& cancellation, Omni& engine) {
  if (!s.videos.start(id)) return;
  const auto start = Clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  try {
    auto mp4 = generate_video(engine, request, [&](int step, int total) {
      const int percent = total > 0 ? std::min(99, 100 * step / total) : 0;
      // A record deleted meanwhile (DELETE raced the cancel) stops the job too.
      if (!s.videos.set_progress(id, percent)) cancellation->cancel(CancelReason::deleted);
      cancellation->throw_if_cancelled();
    });
    s.metrics.observe_generation("video", GenerationOutcome::ok, seconds());
    publish_figures(s, engine);
    s.videos.complete(id, std::move(mp4));
  } catch (const Cancelled& e) {
    s.metrics.observe_generation("video", GenerationOutcome::cancelled, seconds());
    publish_figures(s, engine);
    if (s.videos.fail(id, "cancelled", e.what())) log_line(id + " failed: cancelled: " + e.what());
  } catch (...) {
    s.metrics.observe_generation("video", GenerationOutcome::error, seconds());
    publish_figures(s, engine);
    const ApiError e = translate_current_exception();
    s.videos.fail(id, e.code(), e.what());
  }
}

}  // namespace

void publish_figures(Service& s, Omni& engine) noexcept {
  try {
    s.metrics.publish_offload(OffloadFigures::from_report(engine.offload_report()));
    s.metrics.publish_prompt_cache(engine.prompt_cache_stats());
  } catch (const std::exception& e) {
    log_line(std::string("publishing offload figures failed: ") + first_line(e.what()));
  }
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
  job.run = [&s, id, request, cancellation = job.cancellation](Omni& engine) {
    run_video_job(s, id, request, cancellation, engine);
  };
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
