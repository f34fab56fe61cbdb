#include "request_body.h"

#include <strings.h>

#include "http_server.h"
#include "omni/error.h"

namespace omni::server {

namespace {

// Parts a form may have: more is no request this server serves.
constexpr std::size_t kMaxFormParts = 64;

bool starts_with_ignoring_case(const std::string& s, std::string_view prefix) {
  return s.size() >= prefix.size() && ::strncasecmp(s.data(), prefix.data(), prefix.size()) == 0;
}

// Counts the bytes a body delivers against the limit.
class BodyBudget {
 public:
  explicit BodyBudget(std::uint64_t max) : max_(max) {}
  bool take(std::size_t n) {
    used_ += n;
    exceeded_ = exceeded_ || used_ > max_;
    return !exceeded_;
  }
  bool exceeded() const { return exceeded_; }

 private:
  const std::uint64_t max_;
  std::uint64_t used_ = 0;
  bool exceeded_ = false;
};

[[noreturn]] void fail_reading(const BodyBudget& budget, std::uint64_t max_bytes,
                               const char* what) {
  if (auto* connection = Connection::current()) connection->close_after_response();
  if (budget.exceeded())
    throw ApiError(ErrorKind::too_large, "body_too_large",
                   detail::concat("the request body exceeds the server's limit of ", max_bytes,
                                  " bytes (--max-body)"));
  if (const auto* connection = Connection::current();
      connection && connection->chunk_size_malformed())
    throw ApiError(ErrorKind::malformed, "invalid_chunk_size",
                   "a chunk-size line of the chunked body is not a hexadecimal number "
                   "(RFC 9112: hex digits, then optional ';' extensions)");
  if (const auto* connection = Connection::current(); connection && connection->timed_out())
    throw ApiError(ErrorKind::timed_out, "request_timeout",
                   "the request body did not arrive in time (--receive-timeout)");
  throw ApiError(ErrorKind::malformed, "invalid_body", what);
}

}  // namespace

bool has_body(const httplib::Request& req) {
  return req.has_header("Transfer-Encoding") ||
         (req.has_header("Content-Length") && req.get_header_value("Content-Length") != "0");
}

RequestBody read_request_body(const httplib::Request& req, const httplib::ContentReader& reader,
                              std::uint64_t max_bytes) {
  RequestBody body;
  if (!req.has_header("Content-Length") &&
      ::strcasecmp(req.get_header_value("Transfer-Encoding").c_str(), "chunked") != 0)
    return body;
  BodyBudget budget(max_bytes);
  if (auto* connection = Connection::current(); connection && !req.has_header("Content-Length"))
    connection->expect_chunked_body();
  const std::string type = req.get_header_value("Content-Type");
  if (req.is_multipart_form_data()) {
    body.is_form = true;
    const bool ok = reader(
        [&](const httplib::MultipartFormData& part) {
          if (body.fields.size() >= kMaxFormParts) return false;
          body.fields.push_back({part.name, "", !part.filename.empty()});
          return true;
        },
        [&](const char* data, std::size_t n) {
          if (!budget.take(n)) return false;
          // A file's content is not kept (FormField); only text fields are.
          if (!body.fields.empty() && !body.fields.back().is_file)
            body.fields.back().value.append(data, n);
          return true;
        });
    if (!ok)
      fail_reading(budget, max_bytes,
                   detail::concat("the multipart/form-data body is malformed (or has more than ",
                                  kMaxFormParts, " parts)")
                       .c_str());
    return body;
  }
  std::string text;
  const bool ok = reader([&](const char* data, std::size_t n) {
    if (!budget.take(n)) return false;
    text.append(data, n);
    return true;
  });
  if (!ok) fail_reading(budget, max_bytes, "the request body could not be read");
  if (starts_with_ignoring_case(type, "application/x-www-form-urlencoded")) {
    body.is_form = true;
    // Not httplib's query parser: it kept what followed a pair's last '='
    // (prompt=E=mc2;z=1 arrived as "1") and sorted the fields by name.
    body.fields = parse_urlencoded_form(text);
  } else {
    body.json = std::move(text);
  }
  return body;
}

}  // namespace omni::server
