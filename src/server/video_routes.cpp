// The video API: POST /v1/videos (a job), POST /v1/videos/sync (the MP4 in
// the answer), GET /v1/videos (a page of jobs), GET|DELETE /v1/videos/{id},
// GET /v1/videos/{id}/content.
#include <algorithm>

#include "engine_jobs.h"
#include "generation.h"
#include "http_reply.h"
#include "omni/random_seed.h"
#include "request_body.h"
#include "router.h"
#include "service.h"

namespace omni::server {

namespace {

using nlohmann::json;

constexpr const char* kIdPattern = "([A-Za-z0-9_-]{1,128})";

void check_video_supported(const Service& s) {
  if (!s.video_supported)
    throw ApiError(ErrorKind::not_implemented, "video_unsupported",
                   "this omni was built without video support (OMNI_WITH_VIDEO=OFF)");
}

// The body → a resolved request within the server's limits, its seed picked
// when the client left it to us.
pipelines::GenerationRequest video_request(const Service& s, const httplib::Request& req,
                                           const httplib::ContentReader& reader) {
  check_video_supported(s);
  const auto body = read_request_body(req, reader, s.options.max_body_bytes);
  auto parsed = body.is_form ? parse_video_request(body.fields) : parse_video_request(body.json);
  check_model(s, parsed.model);
  if (parsed.random_seed) parsed.request.seed = random_seed();
  auto resolved = resolve_video(*s.pipeline, parsed);
  check_limits(resolved, s.limits);
  return resolved;
}

VideoJob video_record(const Service& s, const pipelines::GenerationRequest& r) {
  VideoJob job;
  job.model = s.model_id;
  job.prompt = r.prompt;
  job.size = detail::concat(r.width.value_or(0), "x", r.height.value_or(0));
  job.num_frames = r.num_frames.value_or(0);
  job.fps = r.fps.value_or(0);
  job.steps = r.steps.value_or(0);
  job.seed = r.seed;
  return job;
}

VideoJob find_video(Service& s, const std::string& id) {
  auto job = s.videos.get(id);
  if (!job)
    throw ApiError(ErrorKind::not_found, "video_not_found", "no video job '" + id + "'",
                   "video_id");
  return *std::move(job);
}

// GET /v1/videos?limit=&order=&after= (OpenAI's cursor page).
json list_page(Service& s, const httplib::Request& req) {
  int limit = 20;
  if (req.has_param("limit")) {
    const std::string text = req.get_param_value("limit");
    if (text.empty() || text.size() > 3 ||
        text.find_first_not_of("0123456789") != std::string::npos || std::stoi(text) < 1 ||
        std::stoi(text) > 100)
      throw ApiError(ErrorKind::invalid_value, "invalid_value",
                     "limit must be an integer in 1..100, got \"" + first_line(text) + "\"",
                     "limit");
    limit = std::stoi(text);
  }
  const std::string order = req.has_param("order") ? req.get_param_value("order") : "desc";
  if (order != "asc" && order != "desc")
    throw ApiError(ErrorKind::invalid_value, "invalid_value",
                   "order must be \"asc\" or \"desc\", got \"" + first_line(order) + "\"", "order");
  auto jobs = s.videos.list();  // newest first
  if (order == "asc") std::reverse(jobs.begin(), jobs.end());
  auto first = jobs.begin();
  if (req.has_param("after")) {
    const std::string after = req.get_param_value("after");
    first =
        std::find_if(jobs.begin(), jobs.end(), [&](const VideoJob& j) { return j.id == after; });
    if (first == jobs.end())
      throw ApiError(ErrorKind::not_found, "video_not_found",
                     "no video job '" + first_line(after) + "' to list after", "after");
    ++first;
  }
  const auto end = first + std::min<std::ptrdiff_t>(limit, jobs.end() - first);
  json data = json::array();
  for (auto it = first; it != end; ++it) data.push_back(it->to_json(s.videos.ttl_seconds()));
  json page = {{"object", "list"}, {"data", data}, {"has_more", end != jobs.end()}};
  page["first_id"] = first != end ? json(first->id) : json(nullptr);
  page["last_id"] = first != end ? json((end - 1)->id) : json(nullptr);
  return page;
}

}  // namespace

void add_video_routes(RouteTable& routes, Service& s) {
  const std::string id = kIdPattern;

  routes.post("/v1/videos/sync", "/v1/videos/sync", Access::api_key,
              [&s](const httplib::Request& req, httplib::Response& res,
                   const httplib::ContentReader& reader) {
                const auto request = video_request(s, req, reader);
                auto mp4 = run_generation_on_engine<std::string>(
                    s, "video", request,
                    [](const GenerateResult& r) { return encode_mp4(r.frames, r.fps); });
                res.status = 200;
                // What was used, as the job object says it for /v1/videos.
                res.set_header("X-Omni-Seed", std::to_string(request.seed));
                res.set_header("X-Omni-Num-Frames", std::to_string(request.num_frames.value_or(0)));
                res.set_header("X-Omni-Fps", std::to_string(request.fps.value_or(0)));
                res.set_content(std::move(mp4), "video/mp4");
              });

  routes.post("/v1/videos", "/v1/videos", Access::api_key,
              [&s](const httplib::Request& req, httplib::Response& res,
                   const httplib::ContentReader& reader) {
                const auto request = video_request(s, req, reader);
                const auto queued = submit_video_job(s, request, video_record(s, request));
                reply_json(res, 200, queued.to_json(s.videos.ttl_seconds()));
              });

  routes.get("/v1/videos", "/v1/videos", Access::api_key,
             [&s](const httplib::Request& req, httplib::Response& res) {
               reply_json(res, 200, list_page(s, req));
             });

  routes.get("/v1/videos/" + id, "/v1/videos/{id}", Access::api_key,
             [&s](const httplib::Request& req, httplib::Response& res) {
               const auto job = find_video(s, req.matches[1]);
               reply_json(res, 200, job.to_json(s.videos.ttl_seconds()));
               if (job.status == JobStatus::failed) s.videos.mark_fetched(job.id);
             });

  routes.get(
      "/v1/videos/" + id + "/content", "/v1/videos/{id}/content", Access::api_key,
      [&s](const httplib::Request& req, httplib::Response& res) {
        const auto job = find_video(s, req.matches[1]);
        if (req.has_param("variant") && req.get_param_value("variant") != "video")
          throw ApiError(ErrorKind::invalid_value, "unsupported_variant",
                         "only variant \"video\" (the MP4) is served here", "variant");
        switch (job.status) {
          case JobStatus::completed:
            break;
          case JobStatus::queued:
          case JobStatus::in_progress:
            throw ApiError(ErrorKind::not_ready, "video_not_ready",
                           "video job '" + job.id + "' is " + std::string(to_string(job.status)) +
                               "; its content exists once it completed",
                           "video_id");
          case JobStatus::failed:
            s.videos.mark_fetched(job.id);
            throw ApiError(ErrorKind::not_ready, "video_failed",
                           "video job '" + job.id + "' failed: " + job.error_message, "video_id");
        }
        OMNI_INTERNAL_ASSERT(job.mp4 != nullptr, "a completed video job has no content");
        res.status = 200;
        res.set_content(*job.mp4, "video/mp4");
        s.videos.mark_fetched(job.id);  // Note [Jobs finished while draining]
      });

  routes.del(
      "/v1/videos/" + id, "/v1/videos/{id}", Access::api_key,
      [&s](const httplib::Request& req, httplib::Response& res) {
        const auto job = find_video(s, req.matches[1]);
        // Queued: it never runs. Running: it stops at its next step.
        // Finished: the record and content go.
        s.videos.erase(job.id);
        s.queue->cancel(job.id, CancelReason::deleted);
        reply_json(res, 200, {{"id", job.id}, {"object", "video.deleted"}, {"deleted", true}});
      });
}

}  // namespace omni::server
