// Unit tests of the pure request parser (request_parser.h) and error bodies.
#include "omni/server/request_parser.h"

#include <gtest/gtest.h>

#include <string>

#include "server/generation.h"

namespace omni::server {
namespace {

// The kind and code of the ApiError `f` throws.
template <typename F>
std::pair<ErrorKind, std::string> error_of(F&& f) {
  try {
    f();
  } catch (const ApiError& e) {
    return {e.kind(), e.code()};
  }
  ADD_FAILURE() << "no ApiError thrown";
  return {ErrorKind::internal, ""};
}

TEST(RequestParser, ImageWithEveryField) {
  const auto r = parse_image_request(R"({
    "prompt": "a red circle", "model": "example:wan-shaped", "n": 3, "size": "64x32",
    "response_format": "b64_json", "negative_prompt": "blurry", "num_inference_steps": 4,
    "guidance_scale": 5.5, "guidance_scale_2": 2, "seed": 18446744073709551615,
    "user": "ignored", "quality": "hd"})");
  EXPECT_EQ(r.model, "example:wan-shaped");
  EXPECT_EQ(r.n, 3);
  EXPECT_EQ(r.request.prompt, "a red circle");
  EXPECT_EQ(r.request.negative_prompt, "blurry");
  EXPECT_EQ(r.request.width, 64);
  EXPECT_EQ(r.request.height, 32);
  EXPECT_EQ(r.request.steps, 4);
  EXPECT_DOUBLE_EQ(*r.request.guidance_scale, 5.5);
  EXPECT_DOUBLE_EQ(*r.request.guidance_scale_2, 2.0);
  EXPECT_EQ(r.request.seed, 18446744073709551615ull);
  EXPECT_EQ(r.request.num_frames, 1);  // an image is one frame
}

TEST(RequestParser, DefaultsAndNullsAreAbsent) {
  const auto r = parse_image_request(
      R"({"prompt": "x", "size": null, "n": null, "seed": null, "num_inference_steps": null})");
  EXPECT_EQ(r.n, 1);
  EXPECT_EQ(r.request.seed, 0u);
  EXPECT_FALSE(r.request.width);
  EXPECT_FALSE(r.request.steps);
  EXPECT_FALSE(r.request.guidance_scale);
  EXPECT_FALSE(parse_image_request(R"({"prompt": "x", "size": "auto"})").request.width);
}

TEST(RequestParser, VideoFields) {
  const auto r = parse_video_request(
      R"({"prompt": "waves", "size": "32x48", "num_frames": 9, "fps": 8, "seed": 3})");
  EXPECT_EQ(r.request.num_frames, 9);
  EXPECT_EQ(r.request.fps, 8);
  EXPECT_EQ(r.request.width, 32);
  EXPECT_EQ(r.request.height, 48);
  EXPECT_EQ(r.request.seed, 3u);
  EXPECT_FALSE(parse_video_request(R"({"prompt": "waves"})").request.num_frames);
}

TEST(RequestParser, MalformedBodiesAre400) {
  for (const char* body :
       {"", "{", "not json", "[1, 2]", "\"a string\"", "42", "null", "{\"prompt\": \"x\",}"}) {
    SCOPED_TRACE(body);
    EXPECT_EQ(error_of([&] { parse_image_request(body); }),
              std::make_pair(ErrorKind::malformed, std::string("invalid_json")));
  }
}

TEST(RequestParser, WrongTypesAre400) {
  for (const char* body :
       {R"({"prompt": 5})", R"({"prompt": ["a"]})", R"({"prompt": "x", "n": "2"})",
        R"({"prompt": "x", "n": 2.0})", R"({"prompt": "x", "size": 64})",
        R"({"prompt": "x", "num_inference_steps": "4"})",
        R"({"prompt": "x", "num_inference_steps": true})",
        R"({"prompt": "x", "guidance_scale": "high"})", R"({"prompt": "x", "seed": 1.5})",
        R"({"prompt": "x", "model": 1})", R"({"prompt": "x", "negative_prompt": {}})",
        R"({"prompt": "x", "response_format": 0})"}) {
    SCOPED_TRACE(body);
    EXPECT_EQ(error_of([&] { parse_image_request(body); }),
              std::make_pair(ErrorKind::malformed, std::string("invalid_type")));
  }
  EXPECT_EQ(error_of([] { parse_video_request(R"({"prompt": "x", "fps": "8"})"); }).first,
            ErrorKind::malformed);
  EXPECT_EQ(error_of([] { parse_video_request(R"({"prompt": "x", "num_frames": 5.5})"); }).first,
            ErrorKind::malformed);
}

TEST(RequestParser, MissingPromptIs400) {
  EXPECT_EQ(error_of([] { parse_image_request(R"({"n": 1})"); }),
            std::make_pair(ErrorKind::malformed, std::string("missing_field")));
  EXPECT_EQ(error_of([] { parse_video_request(R"({"prompt": null})"); }).first,
            ErrorKind::malformed);
}

TEST(RequestParser, InvalidValuesAre422) {
  for (const char* body :
       {R"({"prompt": ""})", R"({"prompt": "  \n"})", R"({"prompt": "x", "n": 0})",
        R"({"prompt": "x", "n": 11})", R"({"prompt": "x", "n": -1})",
        R"({"prompt": "x", "n": 18446744073709551615})", R"({"prompt": "x", "size": "abc"})",
        R"({"prompt": "x", "size": "64"})", R"({"prompt": "x", "size": "0x64"})",
        R"({"prompt": "x", "size": "64x"})", R"({"prompt": "x", "size": "-64x64"})",
        R"({"prompt": "x", "size": "64x64x64"})", R"({"prompt": "x", "size": "999999x64"})",
        R"({"prompt": "x", "num_inference_steps": 0})",
        R"({"prompt": "x", "num_inference_steps": 4294967296})",
        R"({"prompt": "x", "guidance_scale": -1})", R"({"prompt": "x", "guidance_scale": 1e300})",
        R"({"prompt": "x", "seed": -2})", R"({"prompt": "x", "response_format": "url"})"}) {
    SCOPED_TRACE(body);
    EXPECT_EQ(error_of([&] { parse_image_request(body); }).first, ErrorKind::invalid_value);
  }
  for (const char* body : {R"({"prompt": "x", "num_frames": 0})", R"({"prompt": "x", "fps": 0})",
                           R"({"prompt": "x", "fps": 241})"}) {
    SCOPED_TRACE(body);
    EXPECT_EQ(error_of([&] { parse_video_request(body); }).first, ErrorKind::invalid_value);
  }
}

TEST(RequestParser, ModelDependentValuesAreLeftToThePipeline) {
  // Multiples of 16 and 4k+1 frames belong to Pipeline::resolve.
  const auto r = parse_video_request(R"({"prompt": "x", "size": "30x30", "num_frames": 6})");
  EXPECT_EQ(r.request.width, 30);
  EXPECT_EQ(r.request.num_frames, 6);
}

TEST(RequestParser, SurvivesHostileBodies) {
  const std::string deep(100000, '[');
  EXPECT_EQ(error_of([&] { parse_image_request(deep); }).first, ErrorKind::malformed);
  const std::string deep_valid = std::string(5000, '[') + std::string(5000, ']');
  EXPECT_EQ(error_of([&] { parse_image_request(deep_valid); }).first, ErrorKind::malformed);
  const std::string invalid_utf8 = "{\"prompt\": \"\xff\xfe\"}";
  EXPECT_EQ(error_of([&] { parse_image_request(invalid_utf8); }).first, ErrorKind::malformed);
  const std::string nul("{\"prompt\": \"a\"}\0garbage", 24);
  EXPECT_EQ(error_of([&] { parse_image_request(nul); }).first, ErrorKind::malformed);
}

// Found by fuzz/request_fuzz.cpp: a number too large for a double made the
// JSON parser throw out_of_range (not parse_error), which escaped the parser
// and became a 500 internal_error for a client's malformed body.
TEST(RequestParser, NumberBeyondADoubleIsMalformedJson) {
  for (const char* body : {R"({"prompt": "a cat", "seed": 5e02222222222222222})",
                           R"({"prompt": "a cat", "guidance_scale": -1e400})"}) {
    SCOPED_TRACE(body);
    EXPECT_EQ(error_of([&] { parse_image_request(body); }),
              std::make_pair(ErrorKind::malformed, std::string("invalid_json")));
    EXPECT_EQ(error_of([&] { parse_video_request(body); }),
              std::make_pair(ErrorKind::malformed, std::string("invalid_json")));
  }
}

TEST(RequestParser, LimitsApplyToResolvedRequests) {
  pipelines::GenerationRequest r;
  r.steps = 10;
  r.num_frames = 9;
  EXPECT_NO_THROW(check_limits(r, {10, 9}));
  EXPECT_EQ(error_of([&] {
              check_limits(r, {9, 9});
            }),
            std::make_pair(ErrorKind::invalid_value, std::string("too_many_steps")));
  EXPECT_EQ(error_of([&] {
              check_limits(r, {10, 5});
            }),
            std::make_pair(ErrorKind::invalid_value, std::string("too_many_frames")));
}

// What `curl -F` and the openai client's videos.create send: every value is text.
FormFields form(std::initializer_list<std::pair<const char*, const char*>> fields) {
  FormFields out;
  for (const auto& [name, value] : fields) out.push_back({name, value, false});
  return out;
}

TEST(RequestParser, VideoFormFieldsAreTextNumbers) {
  const auto r = parse_video_request(form({{"prompt", "waves"},
                                           {"width", "48"},
                                           {"height", "32"},
                                           {"num_frames", "9"},
                                           {"fps", "8"},
                                           {"num_inference_steps", "3"},
                                           {"guidance_scale", "4.5"},
                                           {"guidance_scale_2", "3"},
                                           {"negative_prompt", "blurry"},
                                           {"seed", "42"}}));
  EXPECT_EQ(r.request.prompt, "waves");
  EXPECT_EQ(r.request.width, 48);
  EXPECT_EQ(r.request.height, 32);
  EXPECT_EQ(r.request.num_frames, 9);
  EXPECT_EQ(r.request.fps, 8);
  EXPECT_EQ(r.request.steps, 3);
  EXPECT_DOUBLE_EQ(*r.request.guidance_scale, 4.5);
  EXPECT_DOUBLE_EQ(*r.request.guidance_scale_2, 3.0);
  EXPECT_EQ(r.request.negative_prompt, "blurry");
  EXPECT_EQ(r.request.seed, 42u);
  EXPECT_FALSE(r.random_seed);

  const auto openai = parse_video_request(
      form({{"prompt", "a cat"}, {"model", "m"}, {"seconds", "4"}, {"size", "720x1280"}}));
  EXPECT_EQ(openai.model, "m");
  EXPECT_EQ(openai.seconds, 4.0);
  EXPECT_EQ(openai.request.width, 720);
  EXPECT_EQ(openai.request.height, 1280);
  EXPECT_FALSE(openai.request.num_frames);
  EXPECT_TRUE(openai.random_seed);
}

TEST(RequestParser, FormMistakes) {
  for (const auto& [fields, code] : std::vector<std::pair<FormFields, std::string>>{
           {form({{"prompt", "x"}, {"num_frames", "nine"}}), "invalid_type"},
           {form({{"prompt", "x"}, {"num_frames", " 9"}}), "invalid_type"},
           {form({{"prompt", "x"}, {"num_frames", "9.5"}}), "invalid_type"},
           {form({{"prompt", "x"}, {"fps", "0x10"}}), "invalid_type"},
           {form({{"prompt", "x"}, {"guidance_scale", "nan"}}), "invalid_type"},
           {form({{"prompt", "x"}, {"prompt", "y"}}), "duplicate_field"},
           {form({{"size", "32x32"}}), "missing_field"}}) {
    SCOPED_TRACE(code);
    EXPECT_EQ(error_of([&] { parse_video_request(fields); }),
              std::make_pair(ErrorKind::malformed, code));
  }
  EXPECT_EQ(error_of([] {
              parse_video_request(form({{"prompt", "x"}, {"fps", "999"}}));
            }).first,
            ErrorKind::invalid_value);
  FormFields with_file = form({{"prompt", "x"}});
  with_file.push_back({"input_reference", "", true});
  EXPECT_EQ(error_of([&] { parse_video_request(with_file); }),
            std::make_pair(ErrorKind::invalid_value, std::string("unsupported_parameter")));
}

// The regression (issue 34, D5): a file part where a text field belongs
// became the value "(file)": a prompt sent as a file queued a job for the
// prompt "(file)". It is 422 naming the field, for images and videos alike.
TEST(RequestParser, AFileWhereATextFieldBelongsIs422NamingIt) {
  for (const char* name :
       {"prompt", "model", "size", "negative_prompt", "num_frames", "seconds", "seed"}) {
    SCOPED_TRACE(name);
    FormFields fields = form({{"prompt", "x"}});
    if (std::string(name) == "prompt") fields.clear();
    fields.push_back({name, "", true});
    try {
      parse_video_request(fields);
      ADD_FAILURE() << "no ApiError thrown";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.kind(), ErrorKind::invalid_value);
      EXPECT_EQ(e.code(), "file_not_expected");
      EXPECT_EQ(e.param(), name);
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
  FormFields image = form({{"size", "32x32"}});
  image.push_back({"prompt", "", true});
  EXPECT_EQ(error_of([&] { parse_image_request(image); }),
            std::make_pair(ErrorKind::invalid_value, std::string("file_not_expected")));
  // A file in a field the server ignores is still ignored.
  FormFields ignored = form({{"prompt", "x"}});
  ignored.push_back({"user_avatar", "", true});
  EXPECT_EQ(parse_video_request(ignored).request.prompt, "x");
}

// The regression (issue 34, D6): httplib's parser kept what followed the
// LAST '=' of a pair (prompt=E=mc2;z=1 arrived as "1") and sorted fields by
// name. WHATWG splits each pair on its first '='.
TEST(RequestParser, UrlencodedFormsFollowWhatwg) {
  using Fields = std::vector<std::pair<std::string, std::string>>;
  auto parsed = [](std::string_view body) {
    Fields out;
    for (const auto& f : parse_urlencoded_form(body)) {
      EXPECT_FALSE(f.is_file);
      out.emplace_back(f.name, f.value);
    }
    return out;
  };
  EXPECT_EQ(parsed("prompt=E=mc2;z=1"), (Fields{{"prompt", "E=mc2;z=1"}}));
  EXPECT_EQ(parsed("a+b=c+d%20e&%3D=%26%2B"), (Fields{{"a b", "c d e"}, {"=", "&+"}}));
  EXPECT_EQ(parsed("b=1&a=2&b=3"), (Fields{{"b", "1"}, {"a", "2"}, {"b", "3"}}));
  EXPECT_EQ(parsed("&&flag&=v&k=&"), (Fields{{"flag", ""}, {"", "v"}, {"k", ""}}));
  // Invalid percent sequences stay as they are; valid ones take either case.
  EXPECT_EQ(parsed("x=100%&y=%zz%4&z=%4a%4A%41"),
            (Fields{{"x", "100%"}, {"y", "%zz%4"}, {"z", "JJA"}}));
  EXPECT_EQ(parsed("x=%00"), (Fields{{"x", std::string(1, '\0')}}));
  EXPECT_EQ(parsed(""), Fields{});
  const auto r =
      parse_video_request(parse_urlencoded_form("prompt=E%3Dmc2+and+E=mc2&num_frames=9&seed=1"));
  EXPECT_EQ(r.request.prompt, "E=mc2 and E=mc2");
  EXPECT_EQ(r.request.num_frames, 9);
}

TEST(RequestParser, UnsupportedVideoFieldsAre422NamingThem) {
  EXPECT_EQ(error_of([&] {
              parse_video_request(
                  R"({"prompt": "x", "input_reference": {"image_url": "http://a/b.png"}})");
            }),
            std::make_pair(ErrorKind::invalid_value, std::string("unsupported_parameter")));
}

// vllm-omni's per-request overrides reach the request, from JSON and forms
// alike; the pipeline decides whether its model takes them.
TEST(RequestParser, BoundaryRatioAndFlowShiftAreTheRequests) {
  const auto json =
      parse_video_request(R"({"prompt": "x", "boundary_ratio": 0.9, "flow_shift": 5})");
  EXPECT_EQ(json.request.boundary_ratio, 0.9);
  EXPECT_EQ(json.request.flow_shift, 5.0);
  const auto from_form = parse_video_request(form({{"prompt", "x"}, {"flow_shift", "12"}}));
  EXPECT_EQ(from_form.request.flow_shift, 12.0);
  EXPECT_FALSE(from_form.request.boundary_ratio);
  const auto image = parse_image_request(R"({"prompt": "x", "boundary_ratio": 0.5})");
  EXPECT_EQ(image.request.boundary_ratio, 0.5);
  for (const char* body :
       {R"({"prompt": "x", "boundary_ratio": 1.5})", R"({"prompt": "x", "flow_shift": -1})"}) {
    SCOPED_TRACE(body);
    EXPECT_EQ(error_of([&] { parse_video_request(body); }).first, ErrorKind::invalid_value);
  }
}

TEST(RequestParser, SecondsSizeAndSeed) {
  const auto r = parse_video_request(R"({"prompt": "x", "seconds": "2.5", "width": 64})");
  EXPECT_EQ(r.seconds, 2.5);
  EXPECT_EQ(r.request.width, 64);
  EXPECT_FALSE(r.request.height);
  EXPECT_EQ(parse_video_request(R"({"prompt": "x", "seconds": 8})").seconds, 8.0);
  EXPECT_EQ(
      error_of([] { parse_video_request(R"({"prompt": "x", "seconds": 4, "num_frames": 9})"); }),
      std::make_pair(ErrorKind::invalid_value, std::string("conflicting_duration")));
  EXPECT_EQ(error_of([] { parse_video_request(R"({"prompt": "x", "seconds": 0})"); }).first,
            ErrorKind::invalid_value);
  EXPECT_EQ(error_of([] { parse_video_request(R"({"prompt": "x", "seconds": "soon"})"); }).first,
            ErrorKind::malformed);
  EXPECT_EQ(
      error_of([] { parse_video_request(R"({"prompt": "x", "size": "32x32", "width": 48})"); }),
      std::make_pair(ErrorKind::invalid_value, std::string("conflicting_size")));
  EXPECT_TRUE(parse_image_request(R"({"prompt": "x", "seed": -1})").random_seed);
  EXPECT_TRUE(parse_image_request(R"({"prompt": "x"})").random_seed);
  EXPECT_FALSE(parse_image_request(R"({"prompt": "x", "seed": 0})").random_seed);
  // In JSON a number must be a number (only seconds may be text, as OpenAI sends it).
  EXPECT_EQ(error_of([] { parse_video_request(R"({"prompt": "x", "num_frames": "9"})"); }).first,
            ErrorKind::malformed);
}

const pipelines::Pipeline& example_pipeline() {
  static const auto pipeline = pipelines::load_pipeline("example:wan-shaped");
  return *pipeline;
}

TEST(RequestParser, SecondsBecomeTheNearestFrameCountTheModelAccepts) {
  auto video = [](const char* body) {
    return resolve_video(example_pipeline(), parse_video_request(body));
  };
  // 4 s at 16 fps = 64 frames: the model takes 4k+1, so 65.
  const auto four = video(R"({"prompt": "x", "seconds": "4", "fps": 16, "size": "32x32"})");
  EXPECT_EQ(four.num_frames, 65);
  EXPECT_EQ(four.fps, 16);
  // 1 s at 8 fps = 8 → 9; 0.1 s at 8 fps rounds to 1 frame (a 4k+1 count).
  EXPECT_EQ(video(R"({"prompt": "x", "seconds": 1, "fps": 8})").num_frames, 9);
  EXPECT_EQ(video(R"({"prompt": "x", "seconds": 0.1, "fps": 8})").num_frames, 1);
  // Without seconds, the model's defaults stay as resolve() gives them.
  EXPECT_EQ(
      video(R"({"prompt": "x"})").num_frames,
      example_pipeline().resolve(parse_video_request(R"({"prompt": "x"})").request).num_frames);
}

// The regression: 512x512, 121 frames, 100 steps was accepted and would have
// held the engine for about an hour.
TEST(RequestParser, CostIsBoundedAndTheErrorSaysTheLimit) {
  pipelines::GenerationRequest r;
  r.width = 512;
  r.height = 512;
  r.num_frames = 121;
  r.steps = 100;
  EXPECT_EQ(request_cost(r), 512ull * 512 * 121 * 100);
  try {
    check_limits(r, {100, 121});
    ADD_FAILURE() << "accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.code(), "too_costly");
    EXPECT_EQ(e.status(), 422);
    EXPECT_NE(std::string(e.what()).find(std::to_string(kDefaultMaxCost)), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("--max-cost"), std::string::npos) << e.what();
  }
  // Wan2.2's own 720p request fits the default; n counts.
  r.width = 1280;
  r.height = 720;
  r.num_frames = 81;
  r.steps = 40;
  EXPECT_NO_THROW(check_limits(r, {100, 121}));
  EXPECT_EQ(error_of([&] { check_limits(r, {100, 121}, 2); }).second, "too_costly");
  r.width = r.height = 1 << 30;  // saturates instead of wrapping
  EXPECT_EQ(request_cost(r, 10), std::numeric_limits<std::uint64_t>::max());
}

TEST(ApiError, BodyHasOpenAIShape) {
  const ApiError e(ErrorKind::invalid_value, "invalid_size", "bad size", "size");
  EXPECT_EQ(e.status(), 422);
  const auto body = e.body();
  EXPECT_EQ(body["error"]["message"], "bad size");
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  EXPECT_EQ(body["error"]["code"], "invalid_size");
  EXPECT_EQ(body["error"]["param"], "size");
  EXPECT_TRUE(error_body(ErrorKind::overloaded, "queue_full", "busy")["error"]["param"].is_null());
  EXPECT_EQ(http_status(ErrorKind::malformed), 400);
  EXPECT_EQ(http_status(ErrorKind::unauthorized), 401);
  EXPECT_EQ(http_status(ErrorKind::not_found), 404);
  EXPECT_EQ(http_status(ErrorKind::method_not_allowed), 405);
  EXPECT_EQ(http_status(ErrorKind::timed_out), 408);
  EXPECT_EQ(http_status(ErrorKind::too_large), 413);
  EXPECT_EQ(http_status(ErrorKind::overloaded), 503);
  EXPECT_EQ(http_status(ErrorKind::internal), 500);
}

TEST(Base64, MatchesRfc4648Vectors) {
  EXPECT_EQ(base64_encode(""), "");
  EXPECT_EQ(base64_encode("f"), "Zg==");
  EXPECT_EQ(base64_encode("fo"), "Zm8=");
  EXPECT_EQ(base64_encode("foo"), "Zm9v");
  EXPECT_EQ(base64_encode("foob"), "Zm9vYg==");
  EXPECT_EQ(base64_encode("fooba"), "Zm9vYmE=");
  EXPECT_EQ(base64_encode("foobar"), "Zm9vYmFy");
  EXPECT_EQ(base64_encode(std::string("\xff\x00\x80", 3)), "/wCA");
}

}  // namespace
}  // namespace omni::server
