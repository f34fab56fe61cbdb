#include "router.h"

#include <strings.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "http_reply.h"
#include "http_server.h"
#include "omni/error.h"
#include "request_body.h"
#include "service.h"

namespace omni::server {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// Note [Request framing]
// Every request passes these checks before its handler runs, before the API
// key is checked and before a byte of its body is read:
// - Content-Length is one plain decimal number (httplib would read "-1" as
//   2^64-1 and "abc" as 0), else 400;
// - Transfer-Encoding is only "chunked", and never together with
//   Content-Length (the two framings of request smuggling), else 400;
// - a declared Content-Length over --max-body is 413 at once (a chunked body
//   is counted as it arrives, request_body.h);
// - an unknown path is 404, a known path under another method 405 with Allow.
// A request answered here with a body is never read further, so its
// connection closes after the answer; so does one whose route takes no body
// but that sent one anyway.
void check_framing(const httplib::Request& req, std::uint64_t max_body) {
  const auto lengths = req.get_header_value_count("Content-Length");
  const bool chunked = req.has_header("Transfer-Encoding");
  if (chunked && (req.get_header_value_count("Transfer-Encoding") > 1 ||
                  ::strcasecmp(req.get_header_value("Transfer-Encoding").c_str(), "chunked") != 0))
    throw ApiError(ErrorKind::malformed, "invalid_transfer_encoding",
                   "Transfer-Encoding must be \"chunked\" (or absent)");
  if (lengths == 0) return;
  if (chunked)
    throw ApiError(ErrorKind::malformed, "invalid_content_length",
                   "a request must not have both Content-Length and Transfer-Encoding");
  const std::string length = req.get_header_value("Content-Length");
  if (lengths > 1 || length.empty() || length.size() > 19 ||
      length.find_first_not_of("0123456789") != std::string::npos)
    throw ApiError(ErrorKind::malformed, "invalid_content_length",
                   "Content-Length must be one non-negative decimal number, got \"" +
                       first_line(length).substr(0, 32) + "\"");
  if (std::stoull(length) > max_body)
    throw ApiError(
        ErrorKind::too_large, "body_too_large",
        detail::concat("the request body (", length, " bytes) exceeds the server's limit of ",
                       max_body, " bytes (--max-body)"));
}

void check_route(const RouteTable::Match& m, const httplib::Request& req, httplib::Response& res) {
  if (!m.path_known)
    throw ApiError(ErrorKind::not_found, "unknown_route",
                   "no route for " + req.method + " " + first_line(req.path));
  if (!m.method_allowed) {
    res.set_header("Allow", m.allow);
    throw ApiError(
        ErrorKind::method_not_allowed, "method_not_allowed",
        req.method + " is not allowed on " + first_line(req.path) + "; allowed: " + m.allow);
  }
}

// An error body for statuses the HTTP library sets itself.
json library_error_body(const httplib::Request& req, int status, const Service& s) {
  switch (status) {
    case 400:
      return error_body(ErrorKind::malformed, "bad_request", "the HTTP request is malformed");
    case 404:
      return error_body(ErrorKind::not_found, "unknown_route",
                        "no route for " + req.method + " " + first_line(req.path));
    case 408:
      return error_body(
          ErrorKind::timed_out, "request_timeout",
          detail::concat("the request did not arrive within ", s.options.receive_timeout_seconds,
                         " s (--receive-timeout)"));
    case 413:
      return error_body(ErrorKind::too_large, "body_too_large",
                        detail::concat("the request body exceeds the server's limit of ",
                                       s.options.max_body_bytes, " bytes (--max-body)"));
    case 414:
      return error_body(ErrorKind::uri_too_long, "uri_too_long", "the request URI is too long");
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

std::string method_label(const std::string& method) {
  for (const char* m : {"GET", "POST", "DELETE", "HEAD", "PUT", "PATCH", "OPTIONS"})
    if (method == m) return method;
  return "other";
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

double seconds_since_start() {
  return t_request_start ? std::chrono::duration<double>(Clock::now() - *t_request_start).count()
                         : 0.0;
}

}  // namespace

void check_model(const Service& s, const std::string& model) {
  if (model.empty() || model == s.model_id ||
      model == std::filesystem::path(s.model_id).lexically_normal().filename().string())
    return;
  throw ApiError(
      ErrorKind::not_found, "model_not_found",
      "model '" + model + "' is not served here; this server serves '" + s.model_id + "'", "model");
}

std::unique_ptr<RouteTable> install_routes(httplib::Server& http, Service& s) {
  auto routes = std::make_unique<RouteTable>(http, s.options.api_key);
  add_probe_routes(*routes, s);
  add_image_routes(*routes, s);
  add_video_routes(*routes, s);
  RouteTable* table = routes.get();

  http.set_pre_routing_handler([&s, table](const httplib::Request& req, httplib::Response& res) {
    t_request_start = Clock::now();
    const auto m = table->match(req.method, req.path);
    auto* connection = Connection::current();
    if (connection != nullptr && has_body(req) && !m.reads_body) connection->close_after_response();
    bool answered = false;
    answer_guarded(res, [&] {
      try {
        check_framing(req, s.options.max_body_bytes);
        check_route(m, req, res);
      } catch (const ApiError&) {
        answered = true;
        if (connection != nullptr && has_body(req)) connection->close_after_response();
        reply_error(res, translate_current_exception());  // keeps the Allow check_route set
      }
    });
    return answered ? httplib::Server::HandlerResponse::Handled
                    : httplib::Server::HandlerResponse::Unhandled;
  });

  // Note [Expect: 100-continue]
  // httplib answers "100 Continue" before routing, so the client would send a
  // body the pre-routing checks then refuse (a 60 MB one for a 413). The same
  // checks, and the API key's, run here first: a request they refuse gets its
  // error instead of the 100, and its connection closes (the client may send
  // the body regardless).
  http.set_expect_100_continue_handler(
      [&s, table](const httplib::Request& req, httplib::Response& res) {
        answer_guarded(res, [&] {
          try {
            const auto m = table->match(req.method, req.path);
            check_framing(req, s.options.max_body_bytes);
            check_route(m, req, res);
            if (m.needs_key) check_api_key(s.options.api_key, req);
          } catch (const ApiError&) {
            reply_error(res, translate_current_exception());  // keeps check_route's Allow
          }
        });
        if (res.status < 400) return 100;
        if (auto* c = Connection::current()) c->close_after_response();
        return res.status;
      });

  http.set_error_handler(httplib::Server::HandlerWithResponse(
      [&s](const httplib::Request& req, httplib::Response& res) {
        try {
          if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
          auto* c = Connection::current();
          // httplib answers 400 when a read fails; one that ran out of time is a 408.
          if (c != nullptr && c->timed_out()) res.status = 408;
          // A request httplib could not parse leaves the connection at an
          // unknown place in the byte stream: nothing after it is a request.
          if (c != nullptr && res.status == 400) c->close_after_response();
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
  http.set_post_routing_handler([&s, table](const httplib::Request& req, httplib::Response& res) {
    try {
      if (const auto* c = Connection::current(); c != nullptr && c->closing())
        res.set_header("Connection", "close");
      s.metrics.observe_request(table->match(req.method, req.path).label, method_label(req.method),
                                res.status, seconds_since_start());
    } catch (...) {
      // Counting must never take a connection down.
    }
  });

  // The access log: one line per request once it was written.
  http.set_logger([](const httplib::Request& req, const httplib::Response& res) {
    try {
      const double seconds = seconds_since_start();
      t_request_start.reset();
      char ms[32];
      std::snprintf(ms, sizeof ms, "%.1f", seconds * 1e3);
      log_line(printable(req.method, 16) + " " + printable(req.path) + " " +
               std::to_string(res.status) + " " + ms + " ms");
    } catch (...) {
      // Logging must never take a connection down.
    }
  });
  return routes;
}

}  // namespace omni::server
