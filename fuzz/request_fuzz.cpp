// Fuzzes the server's request bodies through the chain the router runs
// before a job is queued (router.cpp): parse_image_request /
// parse_video_request, the served pipeline's resolve() (example:wan-shaped,
// as the server tests serve it) and check_limits, and on failure the error
// body the client would get. No socket. Expected: a request, an ApiError
// (400/422) or an InvalidRequest (422); any other exception would be a 500
// for a client's mistake, and is a finding.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

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

// As router.cpp's reply_error renders it.
void render(const server::ApiError& e) {
  if (e.status() < 400 || e.status() >= 500) __builtin_trap();  // a client error, never a 5xx
  (void)e.body().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

template <typename Parse>
void run(std::string_view body, Parse&& parse) {
  try {
    const auto parsed = parse(body);
    const auto resolved = served_pipeline().resolve(parsed.request);
    server::check_limits(resolved, server::RequestLimits{});
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
  return 0;
}
