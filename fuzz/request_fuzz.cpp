// Fuzzes the server's request bodies through the chain the routes run
// before a job is queued (image_routes.cpp, video_routes.cpp):
// parse_image_request / parse_video_request (of JSON, of form fields: the
// input's lines "name=value", and of the input as an urlencoded body), the
// served pipeline's resolve() (example:wan-shaped, as the server tests serve
// it; resolve_video for videos, which turns seconds into frames) and
// check_limits, and on failure
// the error body the client would get. No socket. Expected: a request, an ApiError
// (400/422) or an InvalidRequest (422); any other exception would be a 500
// for a client's mistake, and is a finding.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <type_traits>

#include "omni/error.h"
#include "omni/pipelines/pipeline.h"
#include "omni/server/api_error.h"
#include "omni/server/request_parser.h"

namespace server = omni::server;

namespace {

const omni::pipelines::Pipeline& served_pipeline() {
  static const std::shared_ptr<omni::pipelines::Pipeline> pipeline =
      omni::pipelines::load_pipeline("example:wan-shaped");
  return *pipeline;
}

// As http_reply.cpp's reply_error renders it.
void render(const server::ApiError& e) {
  if (e.status() < 400 || e.status() >= 500) __builtin_trap();  // a client error, never a 5xx
  (void)e.body().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// The input's lines "name=value" as a form's fields (what read_request_body
// makes of a multipart/form-data body).
server::FormFields form_of(std::string_view input) {
  server::FormFields fields;
  while (!input.empty()) {
    const auto end = std::min(input.find('\n'), input.size());
    const auto line = input.substr(0, end);
    const auto eq = line.find('=');
    if (eq != std::string_view::npos)
      fields.push_back({std::string(line.substr(0, eq)), std::string(line.substr(eq + 1)), false});
    input.remove_prefix(std::min(end + 1, input.size()));
  }
  return fields;
}

template <typename Parse>
void run(std::string_view body, Parse&& parse) {
  try {
    const auto parsed = parse(body);
    if constexpr (std::is_same_v<std::decay_t<decltype(parsed)>, server::VideoRequest>) {
      server::check_limits(server::resolve_video(served_pipeline(), parsed),
                           server::RequestLimits{});
    } else {
      server::check_limits(served_pipeline().resolve(parsed.request), server::RequestLimits{},
                           parsed.n);
    }
  } catch (const server::ApiError& e) {
    render(e);
  } catch (const omni::InvalidRequest& e) {
    render(server::ApiError(server::ErrorKind::invalid_value, "invalid_value", e.what()));
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)served_pipeline();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  run(body, [](std::string_view b) { return server::parse_image_request(b); });
  run(body, [](std::string_view b) { return server::parse_video_request(b); });
  run(body, [](std::string_view b) { return server::parse_video_request(form_of(b)); });
  run(body, [](std::string_view b) {
    return server::parse_video_request(server::parse_urlencoded_form(b));
  });
  return 0;
}
