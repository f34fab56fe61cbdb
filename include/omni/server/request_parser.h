// Request parsing: the body of an OpenAI-style request (JSON, or the fields
// of a multipart/form-data or urlencoded form) → a GenerationRequest. Pure
// functions of their input (no engine, no I/O, no globals), so they are easy
// to unit-test and to fuzz.
//
//   auto image = omni::server::parse_image_request(R"({"prompt": "a cat", "n": 2})");
//   auto resolved = pipeline.resolve(image.request);           // defaults, InvalidRequest
//   omni::server::check_limits(resolved, limits, image.n);     // --max-steps, --max-frames,
//   --max-cost
//
//   auto video = omni::server::parse_video_request(form_fields);   // what `curl -F` sends
//   auto resolved = omni::server::resolve_video(pipeline, video);  // seconds → num_frames
//
// Fields follow OpenAI and vllm-omni: prompt, model, n, size "WxH" (or width
// and height), response_format, negative_prompt, num_inference_steps,
// guidance_scale, guidance_scale_2, boundary_ratio, flow_shift, seed; videos add num_frames, fps
// and OpenAI's seconds. A field that is null is absent; unknown fields are ignored (clients send
// "user", "quality", …). In a form every value is text, so a number may come as its decimal text
// ("81"); in JSON it must be a number. Failures throw ApiError: malformed (400) for bodies that are
// not a JSON object and fields of the wrong type or missing; invalid_value (422) for well-typed
// fields with values no request may have, and for fields this server does not support yet
// (input_reference). Values that depend on the model (size a multiple of 16, 4k+1 frames) are the
// pipeline's resolve().
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "omni/pipelines/pipeline.h"
#include "omni/server/api_error.h"

namespace omni::server {

inline constexpr int kMaxImagesPerRequest = 10;

// The fields of a multipart/form-data or application/x-www-form-urlencoded
// body, in order. A file part keeps its name only (is_file; its content is
// not kept).
struct FormField {
  std::string name;
  std::string value;
  bool is_file = false;
};
using FormFields = std::vector<FormField>;

// An application/x-www-form-urlencoded body's fields, in order, per WHATWG
// URL §5.1: split on '&' (empty pieces skipped), each piece on its FIRST '='
// (none: the value is empty), '+' is a space, then %XX is percent-decoded in
// names and values; a '%' not followed by two hex digits stays as it is.
// Values are bytes (no UTF-8 check, as in multipart). Pure; never throws.
FormFields parse_urlencoded_form(std::string_view body);

struct ImageRequest {
  std::string model;  // empty: whatever the server serves
  int n = 1;          // images; image i uses seed + i
  // No seed, or seed -1: the server picks one (request.seed is then 0).
  bool random_seed = true;
  // num_frames is 1: an image is a one-frame generation.
  pipelines::GenerationRequest request;
};

struct VideoRequest {
  std::string model;
  bool random_seed = true;
  // OpenAI's duration; resolve_video turns it into num_frames (which is then
  // unset here: a request gives one or the other).
  std::optional<double> seconds;
  pipelines::GenerationRequest request;
};

// POST /v1/images/generations. Only response_format "b64_json" is served.
ImageRequest parse_image_request(std::string_view json);
ImageRequest parse_image_request(const FormFields& form);
// POST /v1/videos and /v1/videos/sync.
VideoRequest parse_video_request(std::string_view json);
VideoRequest parse_video_request(const FormFields& form);

// "WxH" with positive integers → {W, H}; ApiError invalid_value otherwise.
std::pair<int, int> parse_size(std::string_view size);

// The pipeline's resolve() (defaults, model-dependent checks), with
// `seconds` turned into the frame count nearest to seconds × fps that the
// model accepts (ties round up). InvalidRequest from resolve; ApiError
// invalid_value when no accepted frame count is near.
pipelines::GenerationRequest resolve_video(const pipelines::Pipeline& pipeline,
                                           const VideoRequest& request);

// What a request costs: width × height × frames × steps × count, saturating.
std::uint64_t request_cost(const pipelines::GenerationRequest& resolved, int count = 1);

// 1280x720, 81 frames, 40 steps: Wan2.2's 720p request (Note [Request cost]).
inline constexpr std::uint64_t kDefaultMaxCost = 1280ull * 720 * 81 * 40;

struct RequestLimits {
  int max_steps = 100;                       // --max-steps
  int max_frames = 121;                      // --max-frames
  std::uint64_t max_cost = kDefaultMaxCost;  // --max-cost
};

// Checks a resolved request (defaults filled in) against the server's
// limits; `count` is the number of generations it asks for (an image
// request's n). ApiError invalid_value naming the field and the limit.
void check_limits(const pipelines::GenerationRequest& resolved, const RequestLimits& limits,
                  int count = 1);

}  // namespace omni::server
