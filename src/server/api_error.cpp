#include "omni/server/api_error.h"

namespace omni::server {

int http_status(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::malformed:
      return 400;
    case ErrorKind::unauthorized:
      return 401;
    case ErrorKind::not_found:
      return 404;
    case ErrorKind::method_not_allowed:
      return 405;
    case ErrorKind::timed_out:
      return 408;
    case ErrorKind::not_ready:
      return 409;
    case ErrorKind::too_large:
      return 413;
    case ErrorKind::uri_too_long:
      return 414;
    case ErrorKind::header_too_large:
      return 431;
    case ErrorKind::invalid_value:
      return 422;
    case ErrorKind::internal:
      return 500;
    case ErrorKind::not_implemented:
      return 501;
    case ErrorKind::version_not_supported:
      return 505;
    case ErrorKind::overloaded:
      return 503;
  }
  return 500;
}

std::string_view error_type(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::malformed:
    case ErrorKind::not_found:
    case ErrorKind::method_not_allowed:
    case ErrorKind::timed_out:
    case ErrorKind::not_ready:
    case ErrorKind::too_large:
    case ErrorKind::uri_too_long:
    case ErrorKind::header_too_large:
    case ErrorKind::invalid_value:
    case ErrorKind::version_not_supported:
      return "invalid_request_error";
    case ErrorKind::unauthorized:
      return "authentication_error";
    case ErrorKind::not_implemented:
      return "not_implemented_error";
    case ErrorKind::internal:
    case ErrorKind::overloaded:
      return "server_error";
  }
  return "server_error";
}

ApiError::ApiError(ErrorKind kind, std::string code, std::string message, std::string param)
    : Error(std::move(message)), kind_(kind), code_(std::move(code)), param_(std::move(param)) {}

nlohmann::json ApiError::body() const {
  return error_body(kind_, code_, what(), param_);
}

nlohmann::json error_body(ErrorKind kind, std::string_view code, std::string_view message,
                          std::string_view param) {
  nlohmann::json error = {{"message", std::string(message)},
                          {"type", std::string(error_type(kind))},
                          {"code", std::string(code)}};
  error["param"] = param.empty() ? nlohmann::json(nullptr) : nlohmann::json(std::string(param));
  return {{"error", std::move(error)}};
}

}  // namespace omni::server
