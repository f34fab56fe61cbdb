// Request parsing: the JSON body of an OpenAI-style request → a
// GenerationRequest. Pure functions of their input (no engine, no I/O, no
// globals), so they are easy to unit-test and to fuzz.
//
//   auto image = omni::server::parse_image_request(R"({"prompt": "a cat", "n": 2})");
//   auto resolved = pipeline.resolve(image.request);           // defaults, InvalidRequest
//   omni::server::check_limits(resolved, limits);              // --max-steps, --max-frames
//
// Fields follow vllm-omni / OpenAI: prompt, model, n, size "WxH",
// response_format, negative_prompt, num_inference_steps, guidance_scale,
// guidance_scale_2, seed; videos add num_frames and fps. A field that is null
// is absent; unknown fields are ignored (clients send "user", "quality", …).
// Failures throw ApiError: malformed (400) for bodies that are not a JSON
// object and fields of the wrong type or missing; invalid_value (422) for
// well-typed fields with values no request may have. Values that depend on the
// model (size a multiple of 16, 4k+1 frames) are the pipeline's resolve().
#pragma once

#include <string>
#include <string_view>

#include "omni/pipelines/pipeline.h"
#include "omni/server/api_error.h"

namespace omni::server {

inline constexpr int kMaxImagesPerRequest = 10;

struct ImageRequest {
  std::string model;  // empty: whatever the server serves
  int n = 1;          // images; image i uses seed + i
  // num_frames is 1: an image is a one-frame generation.
  pipelines::GenerationRequest request;
};

struct VideoRequest {
  std::string model;
  pipelines::GenerationRequest request;
};

// POST /v1/images/generations. Only response_format "b64_json" is served.
ImageRequest parse_image_request(std::string_view body);
// POST /v1/videos and /v1/videos/sync.
VideoRequest parse_video_request(std::string_view body);

// "WxH" with positive integers → {W, H}; ApiError invalid_value otherwise.
std::pair<int, int> parse_size(std::string_view size);

struct RequestLimits {
  int max_steps = 100;   // --max-steps
  int max_frames = 121;  // --max-frames
};

// Checks a resolved request (defaults filled in) against the server's limits;
// ApiError invalid_value naming the field.
void check_limits(const pipelines::GenerationRequest& resolved, const RequestLimits& limits);

}  // namespace omni::server
