// ApiError: an HTTP error the server answers in OpenAI's shape,
//
//   {"error": {"message": "...", "type": "invalid_request_error", "code": "...", "param": ...}}
//
// Note [HTTP error translation]
// Errors are translated once, at the route boundary (http_reply.cpp's
// translate_current_exception): an ApiError keeps its kind;
// omni::InvalidRequest (the pipeline rejecting a value) is 422;
// omni::Cancelled (a request stopped at shutdown or when its client left) is
// 503; every other exception is 500 and means a bug or a broken engine. The
// kinds below are the whole vocabulary; a new status needs a new kind.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

#include "omni/error.h"

namespace omni::server {

enum class ErrorKind {
  malformed,           // 400: not JSON, not an object, a field of the wrong type or missing
  unauthorized,        // 401: --api-key is set and the bearer token is missing or wrong
  not_found,           // 404: unknown route, job or model
  method_not_allowed,  // 405: a known route asked with another method (Allow lists them)
  timed_out,           // 408: the request's head and body did not arrive within --receive-timeout
  not_ready,           // 409: a video's content asked for before the job completed
  too_large,           // 413: body over --max-body
  uri_too_long,        // 414: a request line over 8 KiB (Note [Request head])
  header_too_large,    // 431: request line and headers over 64 KiB, or over 100 fields
  invalid_value,       // 422: well-formed but invalid (size, steps, frames, empty prompt)
  internal,            // 500: a bug; never the client's fault
  not_implemented,     // 501: this build lacks the feature (video without FFmpeg)
  version_not_supported,  // 505: a request in a protocol version other than HTTP/1.0 or 1.1
  overloaded,             // 503: the queue or the connections are full, the server is shutting
                          //      down, or the request was cancelled
};

int http_status(ErrorKind kind);
// OpenAI's error.type for a kind ("invalid_request_error", "authentication_error", …).
std::string_view error_type(ErrorKind kind);

class ApiError : public Error {
 public:
  // code: a stable machine-readable token ("invalid_size"); param: the request
  // field at fault, empty when none.
  ApiError(ErrorKind kind, std::string code, std::string message, std::string param = {});

  ErrorKind kind() const { return kind_; }
  const std::string& code() const { return code_; }
  const std::string& param() const { return param_; }
  int status() const { return http_status(kind_); }
  nlohmann::json body() const;

 private:
  ErrorKind kind_;
  std::string code_;
  std::string param_;
};

// The error body for a kind without throwing (used for errors the HTTP
// library raises itself: unknown routes, oversized bodies).
nlohmann::json error_body(ErrorKind kind, std::string_view code, std::string_view message,
                          std::string_view param = {});

}  // namespace omni::server
