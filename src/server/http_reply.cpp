#include "http_reply.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>

#include "omni/error.h"

namespace omni::server {

using nlohmann::json;

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string first_line(std::string_view s) {
  return std::string(s.substr(0, s.find('\n')));
}

void log_line(std::string_view line) {
  const std::string out = "omni serve: " + std::string(line) + "\n";
  [[maybe_unused]] const auto ignored = ::write(STDERR_FILENO, out.data(), out.size());
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
    case ErrorKind::method_not_allowed:
    case ErrorKind::timed_out:
    case ErrorKind::not_ready:
    case ErrorKind::too_large:
    case ErrorKind::uri_too_long:
    case ErrorKind::header_too_large:
    case ErrorKind::invalid_value:
    case ErrorKind::internal:
    case ErrorKind::not_implemented:
    case ErrorKind::version_not_supported:
      break;
  }
}

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
  } catch (const Cancelled& e) {
    return ApiError(ErrorKind::overloaded, "cancelled",
                    std::string("the request was cancelled: ") + e.what());
  } catch (const std::exception& e) {
    log_line(std::string("internal error: ") + first_line(e.what()));
    return ApiError(ErrorKind::internal, "internal_error", first_line(e.what()));
  } catch (...) {
    log_line("internal error: unknown exception");
    return ApiError(ErrorKind::internal, "internal_error", "unknown exception");
  }
}

namespace {
bool constant_time_equal(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < a.size(); ++i)
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}
}  // namespace

void check_api_key(std::string_view api_key, const httplib::Request& req) {
  if (api_key.empty()) return;
  const std::string header = req.get_header_value("Authorization");
  constexpr std::string_view scheme = "bearer";
  const bool bearer = header.size() > scheme.size() + 1 && header[scheme.size()] == ' ' &&
                      std::equal(scheme.begin(), scheme.end(), header.begin(), [](char a, char b) {
                        return a == std::tolower(static_cast<unsigned char>(b));
                      });
  if (!bearer)
    throw ApiError(ErrorKind::unauthorized, "missing_api_key",
                   "this server needs an API key: send \"Authorization: Bearer <key>\"");
  std::string_view token = std::string_view(header).substr(scheme.size() + 1);
  token.remove_prefix(std::min(token.find_first_not_of(' '), token.size()));
  if (!constant_time_equal(token, api_key))
    throw ApiError(ErrorKind::unauthorized, "invalid_api_key", "the API key is not valid");
}

void answer_guarded(httplib::Response& res, const std::function<void()>& body) noexcept {
  try {
    try {
      body();
    } catch (...) {
      res.headers.clear();
      reply_error(res, translate_current_exception());
    }
  } catch (...) {  // replying failed (out of memory): a bare 500
    res.status = 500;
    res.body.clear();
  }
}

}  // namespace omni::server
