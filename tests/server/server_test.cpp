// End to end: the real `omni serve` binary over loopback HTTP, every route and
// every error status (tiny sizes: 32x32, 2-4 steps, 5 frames).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "omni/io/image_writer.h"
#include "server/server_process.h"

namespace omni::server {
namespace {

using nlohmann::json;
using namespace testing;
namespace fs = std::filesystem;

const std::string kImage =
    R"({"prompt": "a red circle", "size": "32x32", "num_inference_steps": 2, "seed": 7})";
const std::string kVideo =
    R"({"prompt": "a red circle moving right", "size": "32x32", "num_inference_steps": 2,
        "num_frames": 5, "fps": 8, "seed": 3})";

json body_of(const httplib::Result& r) {
  return json::parse(r->body);
}

// Checks an error response: status and OpenAI's {"error": {message, type, code}}.
void expect_error(const httplib::Result& r, int status, const std::string& code = {}) {
  ASSERT_TRUE(r) << "no response: " << httplib::to_string(r.error());
  EXPECT_EQ(r->status, status) << r->body;
  EXPECT_EQ(r->get_header_value("Content-Type"), "application/json");
  const auto body = json::parse(r->body, nullptr, false);
  ASSERT_TRUE(body.is_object()) << r->body;
  ASSERT_TRUE(body.contains("error")) << r->body;
  const auto& e = body["error"];
  EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty()) << r->body;
  EXPECT_TRUE(e["type"].is_string()) << r->body;
  EXPECT_TRUE(e["code"].is_string()) << r->body;
  if (!code.empty()) EXPECT_EQ(e["code"], code) << r->body;
}

torch::Tensor decode_b64_png(const json& item) {
  return io::decode_png(base64_decode(item["b64_json"].get<std::string>()));
}

// What `omni generate` writes for the same request: uint8 [H, W, 3].
torch::Tensor generate_with_cli(std::uint64_t seed) {
  const auto out = fs::temp_directory_path() / ("omni-serve-cli-" + std::to_string(::getpid()) +
                                                "-" + std::to_string(seed) + ".png");
  const std::string command = std::string(OMNI_BINARY) +
                              " generate example:wan-shaped --enable-cpu-offload --device sim"
                              " --prompt 'a red circle' --size 32x32 --steps 2 --num-frames 1"
                              " --seed " +
                              std::to_string(seed) + " -q -o " + out.string();
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  std::ifstream in(out, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  fs::remove(out);
  return io::decode_png(bytes);
}

std::string wait_for_video(httplib::Client& c, const std::string& id,
                           std::chrono::seconds timeout = 120s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string status;
  while (std::chrono::steady_clock::now() < deadline) {
    const auto r = c.Get("/v1/videos/" + id);
    if (!r || r->status != 200) return "http error";
    status = body_of(r)["status"];
    if (status == "completed" || status == "failed") return status;
    std::this_thread::sleep_for(20ms);
  }
  return "timeout: " + status;
}

class ServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServerProcess(
        {"--max-steps", "10", "--max-frames", "9", "--max-body", "64KiB", "--max-cost", "1000000"});
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static ServerProcess* server_;
};
ServerProcess* ServerTest::server_ = nullptr;

TEST_F(ServerTest, HealthModelsAndMetrics) {
  auto c = server_->client();
  const auto health = c->Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  const auto h = body_of(health);
  EXPECT_EQ(h["status"], "ok");
  EXPECT_EQ(h["model"], "example:wan-shaped");
  EXPECT_EQ(h["device"], "sim");
  EXPECT_EQ(h["stand_in"], true);
  EXPECT_EQ(h["queue"]["capacity"], 8);

  const auto models = c->Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 200);
  const auto m = body_of(models);
  EXPECT_EQ(m["object"], "list");
  ASSERT_EQ(m["data"].size(), 1u);
  EXPECT_EQ(m["data"][0]["id"], "example:wan-shaped");
  EXPECT_EQ(m["data"][0]["object"], "model");

  ASSERT_EQ(c->Post("/v1/images/generations", kImage, "application/json")->status, 200);
  const auto metrics = c->Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_EQ(metrics->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  const auto& text = metrics->body;
  EXPECT_GE(
      metric(text, R"(omni_http_requests_total{endpoint="/health",method="GET",status="200"})")
          .value_or(0),
      1);
  EXPECT_GE(
      metric(
          text,
          R"(omni_http_requests_total{endpoint="/v1/images/generations",method="POST",status="200"})")
          .value_or(0),
      1);
  EXPECT_TRUE(metric(
      text,
      R"(omni_http_request_duration_seconds_bucket{endpoint="/v1/images/generations",le="+Inf"})"));
  EXPECT_EQ(metric(text, "omni_queue_depth"), 0);
  EXPECT_EQ(metric(text, "omni_queue_capacity"), 8);
  // Offload figures: the two experts and the encoder moved host→device,
  // weights never came back, and they have pinned homes.
  EXPECT_GT(
      metric(text, R"(omni_offload_transfer_bytes_total{component="transformer",direction="h2d"})")
          .value_or(0),
      0);
  EXPECT_GT(
      metric(text, R"(omni_offload_transfer_bytes_total{component="text_encoder",direction="h2d"})")
          .value_or(0),
      0);
  EXPECT_EQ(
      metric(text, R"(omni_offload_transfer_bytes_total{component="transformer",direction="d2h"})"),
      0);
  EXPECT_TRUE(metric(
      text, R"(omni_offload_transfer_seconds_total{component="transformer",direction="h2d"})"));
  EXPECT_GT(metric(text, "omni_offload_peak_resident_bytes").value_or(0), 0);
  EXPECT_GT(metric(text, "omni_offload_pinned_host_bytes").value_or(0), 0);
  EXPECT_EQ(
      metric(text, R"(omni_device_info{device="sim",strategy="model-level",stand_in="true"})"), 1);
}

TEST_F(ServerTest, ImagesEqualOmniGenerate) {
  auto c = server_->client();
  const std::string request =
      R"({"prompt": "a red circle", "size": "32x32", "num_inference_steps": 2, "seed": 7, "n": 2,
          "model": "example:wan-shaped", "response_format": "b64_json"})";
  const auto r = c->Post("/v1/images/generations", request, "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("Content-Type"), "application/json");
  const auto body = body_of(r);
  EXPECT_TRUE(body["created"].is_number_integer());
  ASSERT_EQ(body["data"].size(), 2u);
  const auto first = decode_b64_png(body["data"][0]);
  const auto second = decode_b64_png(body["data"][1]);
  EXPECT_EQ(first.sizes(), (std::vector<std::int64_t>{32, 32, 3}));
  EXPECT_EQ(second.sizes(), (std::vector<std::int64_t>{32, 32, 3}));
  EXPECT_FALSE(torch::equal(first, second));  // n images use seeds 7 and 8
  EXPECT_TRUE(torch::equal(first, generate_with_cli(7)));
  EXPECT_TRUE(torch::equal(second, generate_with_cli(8)));
}

TEST_F(ServerTest, ImageSizeIsWidthByHeight) {
  auto c = server_->client();
  const auto r =
      c->Post("/v1/images/generations",
              R"({"prompt": "x", "size": "48x32", "num_inference_steps": 2})", "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(decode_b64_png(body_of(r)["data"][0]).sizes(), (std::vector<std::int64_t>{32, 48, 3}));
}

TEST_F(ServerTest, VideoSyncReturnsMp4) {
  auto c = server_->client();
  const auto r = c->Post("/v1/videos/sync", kVideo, "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("Content-Type"), "video/mp4");
  const auto info = inspect_mp4(r->body);
  EXPECT_EQ(info.first_box, "ftyp");
  EXPECT_EQ(info.width, 32);
  EXPECT_EQ(info.height, 32);
  EXPECT_EQ(info.samples, 5u);
  EXPECT_GT(r->body.size(), 100u);
}

TEST_F(ServerTest, VideoJobLifecycle) {
  auto c = server_->client();
  const auto created = c->Post("/v1/videos", kVideo, "application/json");
  ASSERT_TRUE(created);
  ASSERT_EQ(created->status, 200) << created->body;
  const auto job = body_of(created);
  EXPECT_EQ(job["object"], "video");
  EXPECT_EQ(job["status"], "queued");
  EXPECT_TRUE(job["created_at"].is_number_integer());
  const std::string id = job["id"];
  ASSERT_EQ(id.rfind("video_", 0), 0u);

  ASSERT_EQ(wait_for_video(*c, id), "completed");
  const auto status = body_of(c->Get("/v1/videos/" + id));
  EXPECT_EQ(status["progress"], 100);
  EXPECT_TRUE(status["error"].is_null());
  EXPECT_EQ(status["size"], "32x32");
  EXPECT_EQ(status["num_frames"], 5);

  const auto content = c->Get("/v1/videos/" + id + "/content");
  ASSERT_TRUE(content);
  ASSERT_EQ(content->status, 200);
  EXPECT_EQ(content->get_header_value("Content-Type"), "video/mp4");
  const auto info = inspect_mp4(content->body);
  EXPECT_EQ(info.first_box, "ftyp");
  EXPECT_EQ(info.width, 32);
  EXPECT_EQ(info.samples, 5u);

  const auto list = body_of(c->Get("/v1/videos"));
  EXPECT_EQ(list["object"], "list");
  bool listed = false;
  for (const auto& v : list["data"]) listed |= v["id"] == id;
  EXPECT_TRUE(listed);

  const auto deleted = c->Delete("/v1/videos/" + id);
  ASSERT_TRUE(deleted);
  EXPECT_EQ(deleted->status, 200);
  EXPECT_EQ(body_of(deleted)["deleted"], true);
  expect_error(c->Get("/v1/videos/" + id), 404, "video_not_found");
  expect_error(c->Get("/v1/videos/" + id + "/content"), 404, "video_not_found");
  expect_error(c->Delete("/v1/videos/" + id), 404, "video_not_found");
}

TEST_F(ServerTest, VideoContentBeforeCompletionIs409AndQueuedJobsCanBeDeleted) {
  auto c = server_->client();
  // The first job keeps the engine busy, so the second is still queued.
  const std::string slow =
      R"({"prompt": "slow", "size": "64x64", "num_inference_steps": 10, "num_frames": 9})";
  const std::string first = body_of(c->Post("/v1/videos", slow, "application/json"))["id"];
  const std::string second = body_of(c->Post("/v1/videos", kVideo, "application/json"))["id"];
  const auto early = c->Get("/v1/videos/" + second + "/content");
  expect_error(early, 409, "video_not_ready");
  EXPECT_EQ(body_of(c->Get("/v1/videos/" + second))["status"], "queued");
  ASSERT_EQ(c->Delete("/v1/videos/" + second)->status, 200);
  expect_error(c->Get("/v1/videos/" + second), 404);
  EXPECT_EQ(wait_for_video(*c, first), "completed");
}

TEST_F(ServerTest, MalformedRequestsAre400) {
  auto c = server_->client();
  for (const std::string body :
       {"{", "[1]", "", R"({"prompt": 5})", R"({"prompt": "x", "n": "2"})",
        R"({"prompt": "x", "num_inference_steps": 2.5})", R"({"size": "32x32"})"}) {
    SCOPED_TRACE(body);
    expect_error(c->Post("/v1/images/generations", body, "application/json"), 400);
  }
  expect_error(c->Post("/v1/videos", R"({"prompt": "x", "fps": "8"})", "application/json"), 400,
               "invalid_type");
  expect_error(c->Post("/v1/videos/sync", "nope", "application/json"), 400, "invalid_json");
}

TEST_F(ServerTest, InvalidValuesAre422) {
  auto c = server_->client();
  const auto jobs_before = body_of(c->Get("/v1/videos"))["data"].size();
  const std::vector<std::pair<std::string, std::string>> images = {
      {R"({"prompt": "x", "size": "30x30"})", "invalid_value"},  // not a multiple of 16
      {R"({"prompt": "x", "size": "abc"})", "invalid_size"},
      {R"({"prompt": "", "size": "32x32"})", "invalid_value"},
      {R"({"prompt": "x", "num_inference_steps": 11})", "too_many_steps"},  // --max-steps 10
      {R"({"prompt": "x", "n": 0})", "invalid_value"},
      {R"({"prompt": "x", "n": 11})", "invalid_value"},
      {R"({"prompt": "x", "response_format": "url"})", "unsupported_response_format"},
  };
  for (const auto& [body, code] : images) {
    SCOPED_TRACE(body);
    expect_error(c->Post("/v1/images/generations", body, "application/json"), 422, code);
  }
  expect_error(c->Post("/v1/videos", R"({"prompt": "x", "num_frames": 13, "size": "32x32"})",
                       "application/json"),
               422, "too_many_frames");  // --max-frames 9
  expect_error(c->Post("/v1/videos/sync", R"({"prompt": "x", "num_frames": 6, "size": "32x32"})",
                       "application/json"),
               422, "invalid_value");  // not 4k+1
  // Nothing invalid became a job.
  EXPECT_EQ(body_of(c->Get("/v1/videos"))["data"].size(), jobs_before);
}

TEST_F(ServerTest, UnknownRoutesJobsAndModelsAre404) {
  auto c = server_->client();
  expect_error(c->Get("/v1/nothing"), 404, "unknown_route");
  expect_error(c->Get("/"), 404, "unknown_route");
  expect_error(c->Post("/v1/images/edits", "{}", "application/json"), 404, "unknown_route");
  expect_error(c->Get("/v1/videos/video_0000"), 404, "video_not_found");
  expect_error(c->Get("/v1/videos/video_0000/content"), 404, "video_not_found");
  expect_error(c->Delete("/v1/videos/video_0000"), 404, "video_not_found");
  expect_error(c->Post("/v1/images/generations", R"({"prompt": "x", "model": "dall-e-3"})",
                       "application/json"),
               404, "model_not_found");
}

// The regression: a wrong method answered 404.
TEST_F(ServerTest, AWrongMethodIs405WithAllow) {
  auto c = server_->client();
  const auto get = c->Get("/v1/images/generations");
  expect_error(get, 405, "method_not_allowed");
  EXPECT_EQ(get->get_header_value("Allow"), "POST");
  const auto put = c->Put("/v1/videos", "{}", "application/json");
  expect_error(put, 405, "method_not_allowed");
  EXPECT_EQ(put->get_header_value("Allow"), "POST, GET");
  const auto post = c->Post("/v1/videos/video_0000", "{}", "application/json");
  expect_error(post, 405, "method_not_allowed");
  EXPECT_EQ(post->get_header_value("Allow"), "GET, DELETE");
  expect_error(c->Delete("/health"), 405, "method_not_allowed");
}

// The regression: the official client and vllm-omni's examples send
// multipart/form-data, and got 400 invalid_json.
TEST_F(ServerTest, VideoJobFromAMultipartForm) {
  auto c = server_->client();
  const httplib::MultipartFormDataItems form = {{"prompt", "a red circle", "", ""},
                                                {"size", "32x32", "", ""},
                                                {"num_inference_steps", "2", "", ""},
                                                {"seconds", "1", "", ""},
                                                {"fps", "8", "", ""},
                                                {"seed", "5", "", ""}};
  const auto created = c->Post("/v1/videos", form);
  ASSERT_TRUE(created);
  ASSERT_EQ(created->status, 200) << created->body;
  const auto job = body_of(created);
  EXPECT_EQ(job["object"], "video");
  EXPECT_EQ(job["status"], "queued");
  EXPECT_EQ(job["size"], "32x32");
  EXPECT_EQ(job["prompt"], "a red circle");
  EXPECT_EQ(job["num_frames"], 9);  // 1 s × 8 fps = 8 → the nearest 4k+1
  EXPECT_EQ(job["fps"], 8);
  EXPECT_EQ(job["seconds"], "1.125");  // what was used
  EXPECT_EQ(job["seed"], 5);
  EXPECT_TRUE(job["completed_at"].is_null());
  EXPECT_TRUE(job["error"].is_null());
  ASSERT_EQ(wait_for_video(*c, job["id"]), "completed");
  const auto done = body_of(c->Get("/v1/videos/" + job["id"].get<std::string>()));
  EXPECT_TRUE(done["completed_at"].is_number_integer());
  const auto content = c->Get("/v1/videos/" + job["id"].get<std::string>() + "/content");
  ASSERT_EQ(content->status, 200);
  EXPECT_EQ(inspect_mp4(content->body).samples, 9u);

  // The same fields urlencoded (`curl -d`), and an image as a form.
  const auto urlencoded =
      c->Post("/v1/videos", "prompt=a+red+circle&size=32x32&num_inference_steps=2&num_frames=5",
              "application/x-www-form-urlencoded");
  ASSERT_EQ(urlencoded->status, 200) << urlencoded->body;
  EXPECT_EQ(body_of(urlencoded)["num_frames"], 5);
  const auto image = c->Post("/v1/images/generations",
                             httplib::MultipartFormDataItems{{"prompt", "x", "", ""},
                                                             {"size", "32x32", "", ""},
                                                             {"num_inference_steps", "2", "", ""}});
  ASSERT_EQ(image->status, 200) << image->body;
}

TEST_F(ServerTest, VideoFormMistakes) {
  auto c = server_->client();
  expect_error(c->Post("/v1/videos", httplib::MultipartFormDataItems{{"prompt", "x", "", ""},
                                                                     {"input_reference", "\x89PNG",
                                                                      "ref.png", "image/png"}}),
               422, "unsupported_parameter");
  expect_error(
      c->Post("/v1/videos", httplib::MultipartFormDataItems{{"prompt", "x", "", ""},
                                                            {"num_frames", "many", "", ""}}),
      400, "invalid_type");
  expect_error(c->Post("/v1/videos", "--nope\r\n", "multipart/form-data; boundary=b"), 400);
  // The regression (issue 34, D5): a prompt sent as a file queued a job for
  // the prompt "(file)".
  const auto file_prompt = c->Post(
      "/v1/videos",
      httplib::MultipartFormDataItems{{"prompt", "a red circle", "prompt.txt", "text/plain"},
                                      {"size", "32x32", "", ""}});
  expect_error(file_prompt, 422, "file_not_expected");
  EXPECT_EQ(body_of(file_prompt)["error"]["param"], "prompt") << file_prompt->body;
}

// The regression (issue 34, D6): urlencoded pairs were split on their last
// '=' (httplib's parser): prompt=E=mc2;z=1 queued the prompt "1".
TEST_F(ServerTest, UrlencodedValuesKeepTheirEqualsSigns) {
  auto c = server_->client();
  const auto created =
      c->Post("/v1/videos", "prompt=E=mc2;z=1&size=32x32&num_inference_steps=2&num_frames=5&seed=2",
              "application/x-www-form-urlencoded");
  ASSERT_TRUE(created);
  ASSERT_EQ(created->status, 200) << created->body;
  const auto job = body_of(created);
  EXPECT_EQ(job["prompt"], "E=mc2;z=1");
  EXPECT_EQ(job["size"], "32x32");
  EXPECT_EQ(wait_for_video(*c, job["id"]), "completed");
}

TEST_F(ServerTest, VideoListPages) {
  auto c = server_->client();
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i)
    ids.push_back(body_of(c->Post("/v1/videos", kVideo, "application/json"))["id"]);
  for (const auto& id : ids) ASSERT_EQ(wait_for_video(*c, id), "completed");
  const auto all = body_of(c->Get("/v1/videos?limit=100"));
  std::vector<std::string> listed;
  for (const auto& v : all["data"]) listed.push_back(v["id"]);
  // Newest first; ours are the three newest.
  ASSERT_GE(listed.size(), 3u);
  EXPECT_EQ(std::vector<std::string>(listed.begin(), listed.begin() + 3),
            (std::vector<std::string>{ids[2], ids[1], ids[0]}));
  const auto first = body_of(c->Get("/v1/videos?limit=1"));
  EXPECT_EQ(first["data"].size(), 1u);
  EXPECT_EQ(first["has_more"], true);
  EXPECT_EQ(first["first_id"], ids[2]);
  EXPECT_EQ(first["last_id"], ids[2]);
  const auto next = body_of(c->Get("/v1/videos?limit=1&after=" + ids[2]));
  EXPECT_EQ(next["data"][0]["id"], ids[1]);
  const auto asc = body_of(c->Get("/v1/videos?order=asc&limit=100"));
  EXPECT_EQ(asc["data"].back()["id"], ids[2]);
  expect_error(c->Get("/v1/videos?limit=0"), 422);
  expect_error(c->Get("/v1/videos?order=up"), 422);
  expect_error(c->Get("/v1/videos?after=video_nope"), 404);
}

// The regression: no limit on what one request may cost.
TEST_F(ServerTest, ACostlyRequestIs422SayingTheLimit) {
  auto c = server_->client();
  const auto r = c->Post("/v1/videos",
                         R"({"prompt": "x", "size": "256x256", "num_frames": 9,
                             "num_inference_steps": 10})",
                         "application/json");
  expect_error(r, 422, "too_costly");
  EXPECT_NE(body_of(r)["error"]["message"].get<std::string>().find("1000000 (--max-cost)"),
            std::string::npos)
      << r->body;
  // n images count: 64x64 x 10 steps x 10 = 409600 fits; 128x128 x 10 x 10 does not.
  expect_error(c->Post("/v1/images/generations",
                       R"({"prompt": "x", "size": "128x128", "num_inference_steps": 10, "n": 10})",
                       "application/json"),
               422, "too_costly");
}

TEST_F(ServerTest, NoSeedPicksOneAndTheReplySaysIt) {
  auto c = server_->client();
  const auto a = body_of(c->Post("/v1/images/generations",
                                 R"({"prompt": "x", "size": "32x32", "num_inference_steps": 2,
                                     "n": 2})",
                                 "application/json"));
  const auto seed = a["data"][0]["seed"].get<std::uint64_t>();
  EXPECT_EQ(a["data"][1]["seed"].get<std::uint64_t>(), seed + 1);
  EXPECT_LT(seed, std::uint64_t{1} << 53);  // JavaScript clients can send it back
  const auto b = body_of(c->Post("/v1/images/generations",
                                 R"({"prompt": "x", "size": "32x32", "num_inference_steps": 2,
                                     "seed": -1})",
                                 "application/json"));
  EXPECT_NE(b["data"][0]["seed"].get<std::uint64_t>(), seed);
  // The seed reported reproduces the image.
  const auto again =
      body_of(c->Post("/v1/images/generations",
                      R"({"prompt": "x", "size": "32x32", "num_inference_steps": 2, "seed": )" +
                          std::to_string(seed) + "}",
                      "application/json"));
  EXPECT_EQ(again["data"][0]["b64_json"], a["data"][0]["b64_json"]);
  const auto sync = c->Post("/v1/videos/sync", R"({"prompt": "x", "size": "32x32",
      "num_inference_steps": 2, "num_frames": 5})",
                            "application/json");
  ASSERT_EQ(sync->status, 200);
  EXPECT_FALSE(sync->get_header_value("X-Omni-Seed").empty());
  EXPECT_EQ(sync->get_header_value("X-Omni-Num-Frames"), "5");
}

// Issue 28 item 3: a repeated prompt (and the shared negative prompt) skips
// the text encoder; /metrics counts it.
TEST_F(ServerTest, RepeatedPromptsHitThePromptCache) {
  auto c = server_->client();
  auto hits = [&] {
    return metric(c->Get("/metrics")->body, "omni_prompt_cache_hits_total").value_or(-1);
  };
  const std::string request =
      R"({"prompt": "a prompt only this test sends", "size": "32x32", "num_inference_steps": 2,
          "seed": 1})";
  ASSERT_EQ(c->Post("/v1/images/generations", request, "application/json")->status, 200);
  const double before = hits();
  const auto first = c->Get("/metrics")->body;
  ASSERT_EQ(c->Post("/v1/images/generations", request, "application/json")->status, 200);
  const auto second = c->Get("/metrics")->body;
  EXPECT_EQ(hits(), before + 2);  // the prompt and the negative prompt
  EXPECT_EQ(metric(second, "omni_prompt_cache_misses_total"),
            metric(first, "omni_prompt_cache_misses_total"));
  EXPECT_EQ(
      metric(second, R"(omni_offload_transfers_total{component="text_encoder",direction="h2d"})"),
      metric(first, R"(omni_offload_transfers_total{component="text_encoder",direction="h2d"})"))
      << "a hit must not upload the encoder";
  EXPECT_GT(metric(second, "omni_prompt_cache_bytes").value_or(0), 0);
  EXPECT_EQ(metric(second, "omni_prompt_cache_capacity_bytes"), 256 << 20);
}

TEST_F(ServerTest, BodiesOverMaxBodyAre413) {
  auto c = server_->client();
  const std::string big = R"({"prompt": ")" + std::string(100 * 1024, 'a') + R"("})";
  const auto r = c->Post("/v1/images/generations", big, "application/json");
  expect_error(r, 413, "body_too_large");
  // The connection was not reset and the server still serves.
  EXPECT_EQ(c->Get("/health")->status, 200);
}

TEST_F(ServerTest, OneLogLinePerRequest) {
  auto c = server_->client();
  ASSERT_EQ(c->Get("/health?probe=log")->status, 200);
  expect_error(c->Get("/v1/log-probe"), 404);
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  std::string log;
  while (std::chrono::steady_clock::now() < deadline) {
    log = server_->stderr_text();
    if (log.find("GET /v1/log-probe 404") != std::string::npos) break;
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(std::regex_search(log, std::regex(R"(GET /health 200 [0-9.]+ ms)"))) << log;
  EXPECT_TRUE(std::regex_search(log, std::regex(R"(GET /v1/log-probe 404 [0-9.]+ ms)"))) << log;
}

TEST(ServerAuth, ApiKeyGuardsV1Routes) {
  ServerProcess server({"--api-key", "s3cret"});
  auto c = server.client();
  expect_error(c->Get("/v1/models"), 401, "missing_api_key");
  expect_error(c->Post("/v1/images/generations", kImage, "application/json"), 401,
               "missing_api_key");
  EXPECT_EQ(c->Get("/v1/models")->get_header_value("WWW-Authenticate"), "Bearer");
  c->set_bearer_token_auth("wrong");
  expect_error(c->Get("/v1/models"), 401, "invalid_api_key");
  c->set_bearer_token_auth("s3cret");
  EXPECT_EQ(c->Get("/v1/models")->status, 200);
  // The regression: a lowercase scheme was refused (RFC 9110: case-insensitive).
  for (const char* header : {"bearer s3cret", "BEARER s3cret", "Bearer  s3cret"}) {
    auto other = server.client();
    EXPECT_EQ(other->Get("/v1/models", {{"Authorization", header}})->status, 200) << header;
  }
  EXPECT_EQ(server.client()->Get("/v1/models", {{"Authorization", "Bearers3cret"}})->status, 401);
  EXPECT_EQ(c->Post("/v1/images/generations", kImage, "application/json")->status, 200);
  auto anonymous = server.client();
  EXPECT_EQ(anonymous->Get("/health")->status, 200);  // probes need no key
  EXPECT_EQ(anonymous->Get("/metrics")->status, 200);
}

TEST(ServerQueue, FullQueueIs503WithRetryAfter) {
  ServerProcess server({"--max-queue", "1"});
  const std::string slow = R"({"prompt": "slow", "size": "64x64", "num_inference_steps": 10})";
  std::vector<int> statuses(2, 0);
  std::vector<std::thread> clients;
  for (int i = 0; i < 2; ++i) {
    clients.emplace_back([&, i] {
      auto c = server.client();
      const auto r = c->Post("/v1/images/generations", slow, "application/json");
      statuses[i] = r ? r->status : -1;
    });
    // Wait until the first runs (then the second waits in the queue).
    auto probe = server.client();
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (std::chrono::steady_clock::now() < deadline) {
      const auto q = body_of(probe->Get("/health"))["queue"];
      if (q["running"] == true && q["queued"] == i) break;
      std::this_thread::sleep_for(2ms);
    }
  }
  auto c = server.client();
  const auto q = body_of(c->Get("/health"))["queue"];
  if (q["running"] == true && q["queued"] == 1) {
    const auto r = c->Post("/v1/images/generations", kImage, "application/json");
    expect_error(r, 503, "queue_full");
    EXPECT_EQ(r->get_header_value("Retry-After"), "1");
    expect_error(c->Post("/v1/videos", kVideo, "application/json"), 503, "queue_full");
  } else {
    ADD_FAILURE() << "the queue never held one running and one waiting job: " << q.dump();
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(statuses, (std::vector<int>{200, 200}));
  EXPECT_EQ(body_of(c->Get("/v1/videos"))["data"].size(), 0u);  // the refused job left no record
}

TEST(ServerJobs, FinishedJobsAreBoundedInCountAndTime) {
  ServerProcess server({"--max-jobs", "2", "--job-ttl", "3"});
  auto c = server.client();
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    ids.push_back(body_of(c->Post("/v1/videos", kVideo, "application/json"))["id"]);
    ASSERT_EQ(wait_for_video(*c, ids.back()), "completed");
  }
  expect_error(c->Get("/v1/videos/" + ids[0]), 404);  // the oldest went first
  EXPECT_EQ(body_of(c->Get("/v1/videos"))["data"].size(), 2u);
  std::this_thread::sleep_for(3500ms);
  EXPECT_EQ(body_of(c->Get("/v1/videos"))["data"].size(), 0u);
  expect_error(c->Get("/v1/videos/" + ids[2] + "/content"), 404);
}

TEST(ServerBind, APortInUseIsAnError) {
  ServerProcess first;
  // No SO_REUSEPORT: a second server must not share the port (Note [Listen socket]).
  const std::string command = "timeout 120 " + std::string(OMNI_BINARY) +
                              " serve example:wan-shaped --device cpu --port " +
                              std::to_string(first.port()) + " > /dev/null 2>&1";
  const int status = std::system(command.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);  // a configuration error
  EXPECT_EQ(first.client()->Get("/health")->status, 200);
}

}  // namespace
}  // namespace omni::server
