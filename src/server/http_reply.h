// Answers and the boundary every route shares (private to src/server): JSON
// replies, error translation (Note [HTTP error translation], api_error.h),
// the API key check and the log line.
#pragma once

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <string_view>

#include "omni/server/api_error.h"

namespace omni::server {

// Invalid UTF-8 (which only our own messages could carry) is replaced, never thrown.
std::string dump(const nlohmann::json& j);
std::string first_line(std::string_view s);
// One line on stderr, "omni serve: " first, written at once (never interleaved).
void log_line(std::string_view line);

void reply_json(httplib::Response& res, int status, const nlohmann::json& body);
// The error's status and body, and the headers its kind calls for
// (Retry-After, WWW-Authenticate).
void reply_error(httplib::Response& res, const ApiError& e);
// The exception being handled as the ApiError the client gets; call inside a catch.
ApiError translate_current_exception();

// ApiError unauthorized unless the request carries "Authorization: Bearer
// <api_key>" (the scheme in any case, RFC 9110); nothing when api_key is empty.
void check_api_key(std::string_view api_key, const httplib::Request& req);

// Runs `body` so that no exception reaches the HTTP library: an exception
// becomes its error reply (translate_current_exception).
void answer_guarded(httplib::Response& res, const std::function<void()>& body) noexcept;

}  // namespace omni::server
