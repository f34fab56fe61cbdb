// Reading a request's body within --max-body (private to src/server).
#pragma once

#include <httplib.h>

#include <cstdint>
#include <string>

#include "omni/server/request_parser.h"

namespace omni::server {

// A body as the parsers take it: JSON text, or a form's fields
// (multipart/form-data, application/x-www-form-urlencoded).
struct RequestBody {
  bool is_form = false;
  std::string json;   // !is_form
  FormFields fields;  // is_form
};

// Whether the request declares a body (a non-zero Content-Length, or any
// Transfer-Encoding).
bool has_body(const httplib::Request& req);

// Reads the body through httplib's content reader, counting every byte it
// delivers (after chunked and gzip decoding) against `max_bytes` as it
// arrives, so nothing over the limit is ever buffered. ApiError too_large
// (413) past the limit, malformed (400) when the body cannot be read or
// parsed as a form; either way the connection closes after the answer (the
// rest of the body is never read). A request with neither Content-Length nor
// chunked Transfer-Encoding has no body. Runs on the connection's thread.
RequestBody read_request_body(const httplib::Request& req, const httplib::ContentReader& reader,
                              std::uint64_t max_bytes);

}  // namespace omni::server
