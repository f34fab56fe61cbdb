#include "router.h"

#include <httplib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <optional>
#include <regex>

#include "generation.h"
#include "omni/error.h"
#include "service.h"
#include "unix_time.h"

namespace omni::server {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// Invalid UTF-8 (which only our own messages could carry) is replaced, never thrown.
std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string first_line(const std::string& s) {
  return s.substr(0, s.find('\n'));
}

void reply_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(dump(body), "application/json");
}

void reply_error(httplib::Response& res, const ApiError& e) {
  reply_json(res, e.status(), e.body());
  switch (e.kind()) {
    case ErrorKind::overloaded:
      res.set_header("Retry-After", "1");
      break;
    case ErrorKind::unauthorized:
      res.set_header("WWW-Authenticate", "Bearer");
      break;
    case ErrorKind::malformed:
    case ErrorKind::not_found:
    case ErrorKind::not_ready:
    case ErrorKind::too_large:
    case ErrorKind::invalid_value:
    case ErrorKind::internal:
    case ErrorKind::not_implemented:
      break;
  }
}

void log_line(const std::string& line) {
  const std::string out = "omni serve: " + line + "\n";
  // One write per line so that concurrent requests never interleave.
  [[maybe_unused]] const auto ignored = ::write(STDERR_FILENO, out.data(), out.size());
}

// ---------------------------------------------------------------------------
// Errors and authentication (Note [HTTP error translation], api_error.h)

ApiError translate_current_exception() {
  try {
    throw;
  } catch (const ApiError& e) {
    return e;
  } catch (const InvalidRequest& e) {
    return ApiError(ErrorKind::invalid_value, "invalid_value", e.what());
  } catch (const DeviceOutOfMemory& e) {
    return ApiError(ErrorKind::invalid_value, "device_out_of_memory",
                    std::string("the request does not fit in device memory: ") + e.what());
  } catch (const std::exception& e) {
    log_line(std::string("internal error: ") + first_line(e.what()));
    return ApiError(ErrorKind::internal, "internal_error", first_line(e.what()));
  } catch (...) {
    log_line("internal error: unknown exception");
    return ApiError(ErrorKind::internal, "internal_error", "unknown exception");
  }
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < a.size(); ++i)
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

void check_api_key(const Service& s, const httplib::Request& req) {
  if (s.options.api_key.empty()) return;
  const std::string header = req.get_header_value("Authorization");
  constexpr std::string_view scheme = "Bearer ";
  if (header.size() <= scheme.size() ||
      !std::equal(scheme.begin(), scheme.end(), header.begin(),
                  [](char a, char b) { return std::tolower(a) == std::tolower(b); }))
    throw ApiError(ErrorKind::unauthorized, "missing_api_key",
                   "this server needs an API key: send \"Authorization: Bearer <key>\"");
  if (!constant_time_equal(std::string_view(header).substr(scheme.size()), s.options.api_key))
    throw ApiError(ErrorKind::unauthorized, "invalid_api_key", "the API key is not valid");
}

using Body = std::function<void(const httplib::Request&, httplib::Response&)>;

// Never lets an exception escape into the HTTP library.
httplib::Server::Handler guarded(Service& s, bool authenticated, Body body) {
  return [&s, authenticated, body = std::move(body)](const httplib::Request& req,
                                                     httplib::Response& res) noexcept {
    try {
      try {
        if (authenticated) check_api_key(s, req);
        body(req, res);
      } catch (...) {
        res.headers.clear();
        reply_error(res, translate_current_exception());
      }
    } catch (...) {  // replying failed (out of memory): a bare 500
      res.status = 500;
      res.body.clear();
    }
  };
}

// An error body for statuses the HTTP library sets itself.
json library_error_body(const httplib::Request& req, int status, const Service& s) {
  switch (status) {
    case 400:
      return error_body(ErrorKind::malformed, "bad_request", "the HTTP request is malformed");
    case 404:
      return error_body(ErrorKind::not_found, "unknown_route",
                        "no route for " + req.method + " " + first_line(req.path));
    case 413:
      return error_body(ErrorKind::too_large, "body_too_large",
                        detail::concat("the request body exceeds the server's limit of ",
                                       s.options.max_body_bytes, " bytes (--max-body)"));
    case 414:
      return error_body(ErrorKind::too_large, "uri_too_long", "the request URI is too long");
    case 500:
      return error_body(ErrorKind::internal, "internal_error", "internal server error");
    default:
      return {{"error",
               {{"message", "the request failed with HTTP status " + std::to_string(status)},
                {"type", status >= 500 ? "server_error" : "invalid_request_error"},
                {"code", "http_" + std::to_string(status)},
                {"param", nullptr}}}};
  }
}

// ---------------------------------------------------------------------------
// Running on the engine's thread

// 503 (with Retry-After, from reply_error) when the queue refused a job.
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

// Publishes the engine's offload figures; engine thread. Jobs do it before
// they deliver their result, so a client that got its answer finds the
// figures of its request in its next /metrics.
void publish_figures(Service& s, Omni& engine) noexcept {
  try {
    s.metrics.publish_offload(OffloadFigures::from_report(engine.offload_report()));
  } catch (const std::exception& e) {
    log_line(std::string("publishing offload figures failed: ") + first_line(e.what()));
  }
}

// Submits `work` and waits for it; ApiError overloaded when the queue is full
// or the server is stopping. Exceptions of `work` are rethrown here.
template <typename T>
T run_on_engine(Service& s, const std::string& kind, std::function<T(Omni&)> work) {
  auto promise = std::make_shared<std::promise<T>>();
  auto result = promise->get_future();
  Job job;
  job.drain = true;
  job.run = [&s, kind, promise, work = std::move(work)](Omni& engine) {
    const auto start = Clock::now();
    try {
      T value = work(engine);
      s.metrics.observe_generation(kind, true,
                                   std::chrono::duration<double>(Clock::now() - start).count());
      publish_figures(s, engine);
      promise->set_value(std::move(value));
    } catch (...) {
      s.metrics.observe_generation(kind, false,
                                   std::chrono::duration<double>(Clock::now() - start).count());
      publish_figures(s, engine);
      promise->set_exception(std::current_exception());
    }
  };
  job.drop = [promise](std::string_view reason) {
    promise->set_exception(std::make_exception_ptr(
        ApiError(ErrorKind::overloaded, "shutting_down", std::string(reason))));
  };
  throw_unless_accepted(s, s.queue->submit(std::move(job)));
  return result.get();
}

struct Abandoned {};  // the video job's record was deleted while it ran

void run_video_job(Service& s, const std::string& id, const pipelines::GenerationRequest& request,
                   Omni& engine) {
  if (!s.videos.start(id)) return;
  const auto start = Clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  try {
    auto mp4 = generate_video(engine, request, [&](int step, int total) {
      const int percent = total > 0 ? std::min(99, 100 * step / total) : 0;
      if (!s.videos.set_progress(id, percent)) throw Abandoned{};
    });
    s.metrics.observe_generation("video", true, seconds());
    publish_figures(s, engine);
    s.videos.complete(id, std::move(mp4));
  } catch (const Abandoned&) {
    s.metrics.observe_generation("video", false, seconds());
    publish_figures(s, engine);
  } catch (...) {
    s.metrics.observe_generation("video", false, seconds());
    publish_figures(s, engine);
    const ApiError e = translate_current_exception();
    s.videos.fail(id, e.code(), e.what());
  }
}

// ---------------------------------------------------------------------------
// Request checks shared by the generation routes

void check_model(const Service& s, const std::string& model) {
  if (model.empty() || model == s.model_id ||
      model == std::filesystem::path(s.model_id).lexically_normal().filename().string())
    return;
  throw ApiError(
      ErrorKind::not_found, "model_not_found",
      "model '" + model + "' is not served here; this server serves '" + s.model_id + "'", "model");
}

void check_video_supported(const Service& s) {
  if (!s.video_supported)
    throw ApiError(ErrorKind::not_implemented, "video_unsupported",
                   "this omni was built without video support (OMNI_WITH_VIDEO=OFF)");
}

// Parse → pipeline defaults and values (Note [Resolve off the engine thread]) → server limits.
pipelines::GenerationRequest resolve(const Service& s, const pipelines::GenerationRequest& r) {
  auto resolved = s.pipeline->resolve(r);
  check_limits(resolved, s.limits);
  return resolved;
}

VideoJob video_record(const Service& s, const pipelines::GenerationRequest& r) {
  VideoJob job;
  job.model = s.model_id;
  job.size = detail::concat(r.width.value_or(0), "x", r.height.value_or(0));
  job.num_frames = r.num_frames.value_or(0);
  job.fps = r.fps.value_or(0);
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

// ---------------------------------------------------------------------------
// Routes

struct RouteInfo {
  std::string method;
  std::regex pattern;
  std::string label;
};

constexpr const char* kIdPattern = "([A-Za-z0-9_-]{1,128})";

std::string method_label(const std::string& method) {
  for (const char* m : {"GET", "POST", "DELETE", "HEAD", "PUT", "PATCH", "OPTIONS"})
    if (method == m) return method;
  return "other";
}

std::string endpoint_label(const std::vector<RouteInfo>& routes, const httplib::Request& req) {
  const std::string method = req.method == "HEAD" ? "GET" : req.method;
  for (const auto& r : routes)
    if (r.method == method && std::regex_match(req.path, r.pattern)) return r.label;
  return "unmatched";
}

// Control characters in a path (it arrives URL-decoded) must not forge log lines.
std::string printable(const std::string& s, std::size_t limit = 256) {
  std::string out;
  for (const char c : s.substr(0, limit))
    out += static_cast<unsigned char>(c) < 0x20 || c == 0x7f ? '?' : c;
  if (s.size() > limit) out += "…";
  return out;
}

thread_local std::optional<Clock::time_point> t_request_start;

}  // namespace

void install_routes(httplib::Server& http, Service& s) {
  auto routes = std::make_shared<std::vector<RouteInfo>>();
  auto add = [&](const std::string& method, const std::string& pattern, const std::string& label,
                 bool authenticated, Body body) {
    routes->push_back({method, std::regex(pattern), label});
    auto handler = guarded(s, authenticated, std::move(body));
    if (method == "GET")
      http.Get(pattern, std::move(handler));
    else if (method == "POST")
      http.Post(pattern, std::move(handler));
    else if (method == "DELETE")
      http.Delete(pattern, std::move(handler));
    else
      OMNI_INTERNAL_ASSERT(false, "no such method ", method);
  };
  const std::string id = kIdPattern;

  add("GET", "/health", "/health", false, [&s](const httplib::Request&, httplib::Response& res) {
    const auto q = s.queue->stats();
    reply_json(
        res, 200,
        {{"status", q.stopping ? "stopping" : "ok"},
         {"model", s.model_id},
         {"device", s.device_name},
         {"stand_in", s.stand_in},
         {"video", s.video_supported},
         {"queue", {{"queued", q.queued}, {"capacity", q.capacity}, {"running", q.running}}}});
  });

  add("GET", "/metrics", "/metrics", false, [&s](const httplib::Request&, httplib::Response& res) {
    const auto q = s.queue->stats();
    res.status = 200;
    res.set_content(s.metrics.render({q.queued, q.capacity, q.running, s.videos.size()}),
                    "text/plain; version=0.0.4; charset=utf-8");
  });

  add("GET", "/v1/models", "/v1/models", true,
      [&s](const httplib::Request&, httplib::Response& res) {
        reply_json(res, 200,
                   {{"object", "list"},
                    {"data", json::array({{{"id", s.model_id},
                                           {"object", "model"},
                                           {"created", s.started_at},
                                           {"owned_by", "omni"}}})}});
      });

  add("POST", "/v1/images/generations", "/v1/images/generations", true,
      [&s](const httplib::Request& req, httplib::Response& res) {
        auto parsed = parse_image_request(req.body);
        check_model(s, parsed.model);
        parsed.request = resolve(s, parsed.request);
        const auto pngs = run_on_engine<std::vector<std::string>>(
            s, "image", [parsed](Omni& engine) { return generate_images(engine, parsed); });
        json data = json::array();
        for (const auto& png : pngs) data.push_back({{"b64_json", base64_encode(png)}});
        reply_json(res, 200, {{"created", unix_now()}, {"data", std::move(data)}});
      });

  add("POST", "/v1/videos/sync", "/v1/videos/sync", true,
      [&s](const httplib::Request& req, httplib::Response& res) {
        check_video_supported(s);
        auto parsed = parse_video_request(req.body);
        check_model(s, parsed.model);
        const auto request = resolve(s, parsed.request);
        auto mp4 = run_on_engine<std::string>(
            s, "video", [request](Omni& engine) { return generate_video(engine, request); });
        res.status = 200;
        res.set_content(std::move(mp4), "video/mp4");
      });

  add("POST", "/v1/videos", "/v1/videos", true,
      [&s](const httplib::Request& req, httplib::Response& res) {
        check_video_supported(s);
        auto parsed = parse_video_request(req.body);
        check_model(s, parsed.model);
        const auto request = resolve(s, parsed.request);
        const std::string job_id = s.videos.create(video_record(s, request));
        const auto record = s.videos.get(job_id);  // as queued, before the worker can start it
        Job job;
        job.id = job_id;
        job.drain = false;  // nobody waits on a connection for it
        job.run = [&s, job_id, request](Omni& engine) {
          run_video_job(s, job_id, request, engine);
        };
        job.drop = [&s, job_id](std::string_view reason) {
          s.videos.fail(job_id, "dropped", std::string(reason));
        };
        const auto submitted = s.queue->submit(std::move(job));
        if (submitted != SubmitResult::accepted) s.videos.erase(job_id);
        throw_unless_accepted(s, submitted);
        OMNI_INTERNAL_ASSERT(record.has_value(), "a new video job vanished");
        reply_json(res, 200, record->to_json(s.videos.ttl_seconds()));
      });

  add("GET", "/v1/videos", "/v1/videos", true,
      [&s](const httplib::Request&, httplib::Response& res) {
        json data = json::array();
        for (const auto& job : s.videos.list()) data.push_back(job.to_json(s.videos.ttl_seconds()));
        reply_json(res, 200, {{"object", "list"}, {"data", std::move(data)}, {"has_more", false}});
      });

  add("GET", "/v1/videos/" + id, "/v1/videos/{id}", true,
      [&s](const httplib::Request& req, httplib::Response& res) {
        const auto job = find_video(s, req.matches[1]);
        reply_json(res, 200, job.to_json(s.videos.ttl_seconds()));
      });

  add("GET", "/v1/videos/" + id + "/content", "/v1/videos/{id}/content", true,
      [&s](const httplib::Request& req, httplib::Response& res) {
        const auto job = find_video(s, req.matches[1]);
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
            throw ApiError(ErrorKind::not_ready, "video_failed",
                           "video job '" + job.id + "' failed: " + job.error_message, "video_id");
        }
        OMNI_INTERNAL_ASSERT(job.mp4 != nullptr, "a completed video job has no content");
        res.status = 200;
        res.set_content(*job.mp4, "video/mp4");
      });

  add("DELETE", "/v1/videos/" + id, "/v1/videos/{id}", true,
      [&s](const httplib::Request& req, httplib::Response& res) {
        const auto job = find_video(s, req.matches[1]);
        // Queued: it never runs. Running: the worker abandons it at its next
        // step (its record is gone). Finished: the record and content go.
        s.queue->cancel(job.id);
        s.videos.erase(job.id);
        reply_json(res, 200, {{"id", job.id}, {"object", "video.deleted"}, {"deleted", true}});
      });

  http.set_pre_routing_handler([](const httplib::Request&, httplib::Response&) {
    t_request_start = Clock::now();
    return httplib::Server::HandlerResponse::Unhandled;
  });

  http.set_error_handler(httplib::Server::HandlerWithResponse(
      [&s](const httplib::Request& req, httplib::Response& res) {
        try {
          if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
          res.set_content(dump(library_error_body(req, res.status, s)), "application/json");
        } catch (...) {
          res.body.clear();
        }
        return httplib::Server::HandlerResponse::Handled;
      }));

  http.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
        // Unreachable: every handler is guarded. Kept as the last line of defence.
        res.status = 500;
        res.set_content(
            dump(error_body(ErrorKind::internal, "internal_error", "internal server error")),
            "application/json");
      });

  // Metrics are counted once the response is final but before it is sent,
  // so a client that got its answer sees it counted in its next /metrics.
  http.set_post_routing_handler([&s, routes](const httplib::Request& req, httplib::Response& res) {
    try {
      const double seconds =
          t_request_start ? std::chrono::duration<double>(Clock::now() - *t_request_start).count()
                          : 0.0;
      s.metrics.observe_request(endpoint_label(*routes, req), method_label(req.method), res.status,
                                seconds);
    } catch (...) {
      // Counting must never take a connection down.
    }
  });

  // The access log: one line per request once it was written.
  http.set_logger([](const httplib::Request& req, const httplib::Response& res) {
    try {
      const double seconds =
          t_request_start ? std::chrono::duration<double>(Clock::now() - *t_request_start).count()
                          : 0.0;
      t_request_start.reset();
      char ms[32];
      std::snprintf(ms, sizeof ms, "%.1f", seconds * 1e3);
      log_line(printable(req.method, 16) + " " + printable(req.path) + " " +
               std::to_string(res.status) + " " + ms + " ms");
    } catch (...) {
      // Logging must never take a connection down.
    }
  });
}

}  // namespace omni::server
