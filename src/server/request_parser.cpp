#include "omni/server/request_parser.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>

namespace omni::server {

using nlohmann::json;

namespace {

// Fields of one request, from a JSON object or a form (all values strings);
// null counts as absent.
class Fields {
 public:
  // text_values: a form's values are text, so a number may be its decimal text.
  Fields(const json& object, bool text_values) : object_(object), text_values_(text_values) {}

  // A form's file part where this server reads a value is a mistake the
  // client should hear of (422), not a value: it once became the text "(file)".
  const json* find(const char* name) const {
    const auto it = object_.find(name);
    if (it == object_.end() || it->is_null()) return nullptr;
    if (it->is_binary())
      throw ApiError(ErrorKind::invalid_value, "file_not_expected",
                     detail::concat(name, " must be a text field, not a file"), name);
    return &*it;
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
    const json value = as_number(name, *v, "an integer");
    if (!value.is_number_integer()) wrong_type(name, "an integer");
    const bool too_big = value.is_number_unsigned() &&
                         value.get<std::uint64_t>() >
                             static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
    const std::int64_t n =
        too_big ? std::numeric_limits<std::int64_t>::max() : value.get<std::int64_t>();
    if (too_big || n < lo || n > hi)
      throw ApiError(ErrorKind::invalid_value, "invalid_value",
                     detail::concat(name, " must be in ", lo, "..", hi, ", got ", value.dump()),
                     name);
    return n;
  }

  std::optional<int> int32(const char* name, int lo,
                           int hi = std::numeric_limits<int>::max()) const {
    const auto v = integer(name, lo, hi);
    return v ? std::optional<int>(static_cast<int>(*v)) : std::nullopt;
  }

  // A finite number in [lo, hi]. `text_too`: a string holding a number is
  // accepted in JSON as well (OpenAI sends seconds as "4").
  std::optional<double> number(const char* name, double lo, double hi,
                               bool text_too = false) const {
    const json* v = find(name);
    if (v == nullptr) return std::nullopt;
    const json value = as_number(name, *v, "a number", text_too);
    if (!value.is_number()) wrong_type(name, "a number");
    const double n = value.get<double>();
    if (!std::isfinite(n) || n < lo || n > hi)
      throw ApiError(
          ErrorKind::invalid_value, "invalid_value",
          detail::concat(name, " must be a number in ", lo, "..", hi, ", got ", value.dump()),
          name);
    return n;
  }

  // A seed: any integer in 0..2^64-1; -1 means "pick one" (nullopt, as absent).
  std::optional<std::uint64_t> seed(const char* name) const {
    const json* v = find(name);
    if (v == nullptr) return std::nullopt;
    const json value = as_number(name, *v, "an integer");
    if (!value.is_number_integer()) wrong_type(name, "an integer");
    if (!value.is_number_unsigned() && value.get<std::int64_t>() == -1) return std::nullopt;
    if (!value.is_number_unsigned() && value.get<std::int64_t>() < 0)
      throw ApiError(ErrorKind::invalid_value, "invalid_value",
                     detail::concat(name,
                                    " must be a non-negative integer (or -1 for a random "
                                    "seed), got ",
                                    value.dump()),
                     name);
    return value.get<std::uint64_t>();
  }

  // A field this server does not support yet: 422 naming it, when present.
  void unsupported(const char* name, const char* why) const {
    if (const auto it = object_.find(name); it != object_.end() && !it->is_null())
      throw ApiError(ErrorKind::invalid_value, "unsupported_parameter",
                     detail::concat(name, " is not supported by this server yet: ", why), name);
  }

 private:
  // The number a value holds: itself, or (in a form, or with text_too) the
  // number its text spells. Anything else is returned as it is, for the
  // caller's type check.
  json as_number(const char* name, const json& v, const char* expected,
                 bool text_too = false) const {
    if (!v.is_string() || !(text_values_ || text_too)) return v;
    const auto& text = v.get_ref<const std::string&>();
    // Plain decimal only: no spaces, no hex, no "inf"/"nan", no JSON beyond a number.
    if (text.empty() || text.size() > 40 ||
        text.find_first_not_of("0123456789+-.eE") != std::string::npos)
      wrong_type(name, expected);
    json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!parsed.is_number()) wrong_type(name, expected);
    return parsed;
  }

  [[noreturn]] static void wrong_type(const char* name, const char* expected) {
    throw ApiError(ErrorKind::malformed, "invalid_type",
                   detail::concat(name, " must be ", expected), name);
  }

  const json& object_;
  const bool text_values_;
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

// A form as a JSON object of strings. A field given twice is ambiguous (a
// proxy and this server could read different values): 400.
json form_object(const FormFields& form) {
  json object = json::object();
  for (const auto& field : form) {
    if (object.contains(field.name))
      throw ApiError(ErrorKind::malformed, "duplicate_field",
                     "form field " + field.name + " is given more than once", field.name);
    // A file's content is not kept: a file part only says the field is there,
    // as a binary value (which no JSON text can hold) that Fields refuses.
    object[field.name] = field.is_file ? json::binary({}) : json(field.value);
  }
  return object;
}

// The fields images and videos share. Returns whether the seed is the server's to pick.
bool parse_common(const Fields& f, std::string& model, pipelines::GenerationRequest& r) {
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
  // vllm-omni's width and height; they must agree with size when both are given.
  for (const auto& [name, field] : {std::pair{"width", &r.width}, std::pair{"height", &r.height}}) {
    const auto value = f.int32(name, 1, 99999);
    if (!value) continue;
    if (*field && **field != *value)
      throw ApiError(ErrorKind::invalid_value, "conflicting_size",
                     detail::concat(name, " ", *value, " contradicts size \"",
                                    f.string("size").value_or(""), "\""),
                     name);
    *field = *value;
  }
  r.steps = f.int32("num_inference_steps", 1);
  r.guidance_scale = f.number("guidance_scale", 0.0, 1000.0);
  r.guidance_scale_2 = f.number("guidance_scale_2", 0.0, 1000.0);
  // vllm-omni's overrides of the model's expert switch and scheduler shift;
  // the pipeline refuses them where the model has no such thing.
  r.boundary_ratio = f.number("boundary_ratio", 0.0, 1.0);
  r.flow_shift = f.number("flow_shift", 0.0, 1000.0);
  const auto seed = f.seed("seed");
  r.seed = seed.value_or(0);
  return !seed.has_value();
}

ImageRequest parse_image(const Fields& f) {
  ImageRequest out;
  out.random_seed = parse_common(f, out.model, out.request);
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

VideoRequest parse_video(const Fields& f) {
  f.unsupported("input_reference",
                "image-to-video needs an image-conditioned model; send a text prompt only");
  VideoRequest out;
  out.random_seed = parse_common(f, out.model, out.request);
  out.request.num_frames = f.int32("num_frames", 1);
  out.request.fps = f.int32("fps", 1, 240);
  out.seconds = f.number("seconds", 0.0, 3600.0, /*text_too=*/true);
  if (out.seconds && *out.seconds <= 0)
    throw ApiError(ErrorKind::invalid_value, "invalid_value", "seconds must be positive",
                   "seconds");
  if (out.seconds && out.request.num_frames)
    throw ApiError(ErrorKind::invalid_value, "conflicting_duration",
                   "give num_frames or seconds, not both", "seconds");
  return out;
}

}  // namespace

namespace {

int urlencoded_hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// '+' → space, then %XX → its byte; anything else as it is.
std::string urlencoded_decode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '+') {
      out.push_back(' ');
      continue;
    }
    if (c == '%' && i + 2 < text.size()) {
      const int high = urlencoded_hex_digit(text[i + 1]);
      const int low = urlencoded_hex_digit(text[i + 2]);
      if (high >= 0 && low >= 0) {
        out.push_back(static_cast<char>(high * 16 + low));
        i += 2;
        continue;
      }
    }
    out.push_back(c);
  }
  return out;
}

}  // namespace

FormFields parse_urlencoded_form(std::string_view body) {
  FormFields fields;
  while (!body.empty()) {
    const auto amp = body.find('&');
    const auto piece = body.substr(0, amp);
    body = amp == std::string_view::npos ? std::string_view() : body.substr(amp + 1);
    if (piece.empty()) continue;
    const auto eq = piece.find('=');
    fields.push_back(
        {urlencoded_decode(piece.substr(0, eq)),
         eq == std::string_view::npos ? std::string() : urlencoded_decode(piece.substr(eq + 1)),
         false});
  }
  return fields;
}

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

ImageRequest parse_image_request(std::string_view json) {
  const auto object = parse_object(json);
  return parse_image(Fields(object, false));
}

ImageRequest parse_image_request(const FormFields& form) {
  const auto object = form_object(form);
  return parse_image(Fields(object, true));
}

VideoRequest parse_video_request(std::string_view json) {
  const auto object = parse_object(json);
  return parse_video(Fields(object, false));
}

VideoRequest parse_video_request(const FormFields& form) {
  const auto object = form_object(form);
  return parse_video(Fields(object, true));
}

pipelines::GenerationRequest resolve_video(const pipelines::Pipeline& pipeline,
                                           const VideoRequest& video) {
  auto r = video.request;
  if (!video.seconds) return pipeline.resolve(r);
  // The model's fps (or the request's), and every other check, with the default frame count.
  const int fps = *pipeline.resolve(r).fps;
  const double wanted = *video.seconds * fps;
  const auto target = static_cast<std::int64_t>(std::llround(std::min(wanted, 1e6)));
  constexpr int kSearch = 64;
  for (std::int64_t d = 0; d <= kSearch; ++d) {
    for (const std::int64_t frames : {target + d, target - d}) {
      if (frames < 1 || frames > std::numeric_limits<int>::max()) continue;
      r.num_frames = static_cast<int>(frames);
      try {
        return pipeline.resolve(r);
      } catch (const InvalidRequest&) {
        // Not a frame count the model takes: try the next nearest.
      }
    }
  }
  throw ApiError(ErrorKind::invalid_value, "invalid_seconds",
                 detail::concat("no frame count the model accepts lies within ", kSearch,
                                " frames of seconds × fps = ", wanted),
                 "seconds");
}

// Note [Request cost]
// What a request holds the engine for grows with every pixel of every frame
// at every step, for each generation it asks for: width × height × frames ×
// steps × n. One number bounds it, whatever mix a client picks (--max-cost);
// the default admits Wan2.2's own 720p request (1280x720, 81 frames, 40
// steps) and refuses, say, 512x512 × 121 frames × 100 steps, which held this
// CPU-only machine's engine for about an hour.
std::uint64_t request_cost(const pipelines::GenerationRequest& r, int count) {
  const std::uint64_t factors[] = {
      static_cast<std::uint64_t>(std::max(r.width.value_or(0), 0)),
      static_cast<std::uint64_t>(std::max(r.height.value_or(0), 0)),
      static_cast<std::uint64_t>(std::max(r.num_frames.value_or(1), 0)),
      static_cast<std::uint64_t>(std::max(r.steps.value_or(0), 0)),
      static_cast<std::uint64_t>(std::max(count, 0))};
  std::uint64_t cost = 1;
  for (const auto f : factors) {
    if (f != 0 && cost > std::numeric_limits<std::uint64_t>::max() / f)
      return std::numeric_limits<std::uint64_t>::max();
    cost *= f;
  }
  return cost;
}

void check_limits(const pipelines::GenerationRequest& resolved, const RequestLimits& limits,
                  int count) {
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
  if (const auto cost = request_cost(resolved, count); cost > limits.max_cost)
    throw ApiError(
        ErrorKind::invalid_value, "too_costly",
        detail::concat("this request costs ", resolved.width.value_or(0), "x",
                       resolved.height.value_or(0), " pixels x ", resolved.num_frames.value_or(1),
                       " frames x ", resolved.steps.value_or(0), " steps x ", count, " = ", cost,
                       "; this server's limit is ", limits.max_cost,
                       " (--max-cost): ask for fewer pixels, frames, steps or images"));
}

}  // namespace omni::server
