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
        R"({"prompt": "x", "seed": -1})", R"({"prompt": "x", "response_format": "url"})"}) {
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
