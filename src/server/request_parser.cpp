#include "omni/server/request_parser.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>

namespace omni::server {

using nlohmann::json;

namespace {

// Fields of one JSON object; null counts as absent.
class Fields {
 public:
  explicit Fields(const json& object) : object_(object) {}

  const json* find(const char* name) const {
    const auto it = object_.find(name);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }

  std::optional<std::string> string(const char* name) const {
    const json* v = find(name);
    if (v == nullptr) return std::nullopt;
    if (!v->is_string()) wrong_type(name, "a string");
    return v->get<std::string>();
  }

  // An integer in [lo, hi]; wrong type is 400, out of range 422.
  std::optional<std::int64_t> integer(const char* name, std::int64_t lo, std::int64_t hi) const {
    const json* v = find(name);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number_integer()) wrong_type(name, "an integer");
    const bool too_big = v->is_number_unsigned() &&
                         v->get<std::uint64_t>() >
                             static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
    const std::int64_t value =
        too_big ? std::numeric_limits<std::int64_t>::max() : v->get<std::int64_t>();
    if (too_big || value < lo || value > hi)
      throw ApiError(ErrorKind::invalid_value, "invalid_value",
                     detail::concat(name, " must be in ", lo, "..", hi, ", got ", v->dump()), name);
    return value;
  }

  std::optional<int> int32(const char* name, int lo,
                           int hi = std::numeric_limits<int>::max()) const {
    const auto v = integer(name, lo, hi);
    return v ? std::optional<int>(static_cast<int>(*v)) : std::nullopt;
  }

  // A finite number in [lo, hi].
  std::optional<double> number(const char* name, double lo, double hi) const {
    const json* v = find(name);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number()) wrong_type(name, "a number");
    const double value = v->get<double>();
    if (!std::isfinite(value) || value < lo || value > hi)
      throw ApiError(
          ErrorKind::invalid_value, "invalid_value",
          detail::concat(name, " must be a number in ", lo, "..", hi, ", got ", v->dump()), name);
    return value;
  }

  // A seed: any integer in 0..2^64-1.
  std::optional<std::uint64_t> seed(const char* name) const {
    const json* v = find(name);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number_integer()) wrong_type(name, "an integer");
    if (!v->is_number_unsigned() && v->get<std::int64_t>() < 0)
      throw ApiError(ErrorKind::invalid_value, "invalid_value",
                     detail::concat(name, " must be a non-negative integer, got ", v->dump()),
                     name);
    return v->get<std::uint64_t>();
  }

 private:
  [[noreturn]] static void wrong_type(const char* name, const char* expected) {
    throw ApiError(ErrorKind::malformed, "invalid_type",
                   detail::concat(name, " must be ", expected), name);
  }

  const json& object_;
};

json parse_object(std::string_view body) {
  // No JSON text holds a raw NUL, and nlohmann's lexer would end the input there.
  if (body.find('\0') != std::string_view::npos)
    throw ApiError(ErrorKind::malformed, "invalid_json", "the request body contains a NUL byte");
  json value;
  try {
    value = json::parse(body.begin(), body.end());
  } catch (const json::exception& e) {
    // parse_error, and out_of_range for a number beyond a double (1e999).
    throw ApiError(ErrorKind::malformed, "invalid_json",
                   std::string("the request body is not valid JSON: ") + e.what());
  }
  if (!value.is_object())
    throw ApiError(ErrorKind::malformed, "invalid_json", "the request body must be a JSON object");
  return value;
}

// The fields images and videos share.
pipelines::GenerationRequest parse_common(const Fields& f, std::string& model) {
  pipelines::GenerationRequest r;
  const auto prompt = f.string("prompt");
  if (!prompt)
    throw ApiError(ErrorKind::malformed, "missing_field", "prompt is required", "prompt");
  if (prompt->find_first_not_of(" \t\r\n") == std::string::npos)
    throw ApiError(ErrorKind::invalid_value, "invalid_value", "prompt must not be empty", "prompt");
  r.prompt = *prompt;
  model = f.string("model").value_or("");
  r.negative_prompt = f.string("negative_prompt").value_or("");
  if (const auto size = f.string("size"); size && *size != "auto") {
    const auto [w, h] = parse_size(*size);
    r.width = w;
    r.height = h;
  }
  r.steps = f.int32("num_inference_steps", 1);
  r.guidance_scale = f.number("guidance_scale", 0.0, 1000.0);
  r.guidance_scale_2 = f.number("guidance_scale_2", 0.0, 1000.0);
  r.seed = f.seed("seed").value_or(0);
  return r;
}

}  // namespace

std::pair<int, int> parse_size(std::string_view size) {
  auto fail = [&]() -> std::pair<int, int> {
    throw ApiError(ErrorKind::invalid_value, "invalid_size",
                   "size must be \"WxH\" with positive integers (e.g. \"512x512\"), got \"" +
                       std::string(size) + "\"",
                   "size");
  };
  const auto x = size.find('x');
  if (x == std::string_view::npos) return fail();
  auto number = [&](std::string_view digits) {
    if (digits.empty() || digits.size() > 5 ||
        digits.find_first_not_of("0123456789") != std::string_view::npos)
      fail();
    int value = 0;
    for (const char c : digits) value = value * 10 + (c - '0');
    if (value <= 0) fail();
    return value;
  };
  return {number(size.substr(0, x)), number(size.substr(x + 1))};
}

ImageRequest parse_image_request(std::string_view body) {
  const json object = parse_object(body);
  const Fields f(object);
  ImageRequest out;
  out.request = parse_common(f, out.model);
  out.request.num_frames = 1;
  out.n = f.int32("n", 1, kMaxImagesPerRequest).value_or(1);
  if (const auto format = f.string("response_format"); format && *format != "b64_json")
    throw ApiError(ErrorKind::invalid_value, "unsupported_response_format",
                   "response_format must be \"b64_json\" (this server returns images inline), "
                   "got \"" +
                       *format + "\"",
                   "response_format");
  return out;
}

VideoRequest parse_video_request(std::string_view body) {
  const json object = parse_object(body);
  const Fields f(object);
  VideoRequest out;
  out.request = parse_common(f, out.model);
  out.request.num_frames = f.int32("num_frames", 1);
  out.request.fps = f.int32("fps", 1, 240);
  return out;
}

void check_limits(const pipelines::GenerationRequest& resolved, const RequestLimits& limits) {
  if (resolved.steps && *resolved.steps > limits.max_steps)
    throw ApiError(ErrorKind::invalid_value, "too_many_steps",
                   detail::concat("num_inference_steps must be at most ", limits.max_steps,
                                  " on this server, got ", *resolved.steps),
                   "num_inference_steps");
  if (resolved.num_frames && *resolved.num_frames > limits.max_frames)
    throw ApiError(ErrorKind::invalid_value, "too_many_frames",
                   detail::concat("num_frames must be at most ", limits.max_frames,
                                  " on this server, got ", *resolved.num_frames),
                   "num_frames");
}

}  // namespace omni::server
