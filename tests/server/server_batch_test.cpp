// Phase-batched scheduling end to end (Note [Phase-batched scheduling],
// job_queue.h): the real `omni serve` binary, video jobs and sync image
// requests of one shape queued together, /metrics'
// omni_component_uploads_total, and the pictures with batching on and off.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/wait.h>

#include <cstdlib>
#include <thread>

#include "omni/io/image_writer.h"
#include "server/server_process.h"

namespace omni::server {
namespace {

using nlohmann::json;
using namespace testing;

std::string batch_test_video(int seed) {
  return json({{"prompt", "a red circle moving right " + std::to_string(seed)},
               {"size", "32x32"},
               {"num_inference_steps", 3},
               {"num_frames", 5},
               {"seed", seed}})
      .dump();
}

double uploads_metric(const std::string& metrics, const std::string& component) {
  return metric(metrics, "omni_component_uploads_total{component=\"" + component + "\"}")
      .value_or(-1);
}

// Three video jobs posted back to back, all completed; /metrics after.
std::string run_three_video_jobs(const std::vector<std::string>& flags) {
  ServerProcess server(flags);
  auto c = server.client();
  std::vector<std::string> ids;
  for (int seed : {5, 6, 7}) {
    const auto r = c->Post("/v1/videos", batch_test_video(seed), "application/json");
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no response");
    if (!r || r->status != 200) return {};
    ids.push_back(json::parse(r->body)["id"]);
  }
  for (const auto& id : ids) {
    const auto deadline = std::chrono::steady_clock::now() + 120s;
    std::string status;
    while (std::chrono::steady_clock::now() < deadline) {
      status = json::parse(c->Get("/v1/videos/" + id)->body)["status"];
      if (status == "completed" || status == "failed") break;
      std::this_thread::sleep_for(20ms);
    }
    EXPECT_EQ(status, "completed") << id;
  }
  return c->Get("/metrics")->body;
}

TEST(ServerBatch, VideoJobsOfOneShapeShareEachUpload) {
  // The first job waits up to 2 s for the other two (--batch-wait-ms).
  const auto batched = run_three_video_jobs({"--max-batch", "4", "--batch-wait-ms", "2000"});
  const auto alone = run_three_video_jobs({"--max-batch", "1"});
  for (const char* expert : {"transformer", "transformer_2", "text_encoder"}) {
    EXPECT_EQ(uploads_metric(batched, expert), 1) << expert;
    EXPECT_EQ(uploads_metric(alone, expert), 3) << expert;
  }
  EXPECT_EQ(uploads_metric(batched, "vae"), 1) << "uploaded once, at load";
}

// Three sync image requests from three clients at once: the PNGs, in seed order.
std::vector<torch::Tensor> three_concurrent_images(const std::vector<std::string>& flags) {
  ServerProcess server(flags);
  std::vector<torch::Tensor> images(3);
  std::vector<std::thread> clients;
  for (int i = 0; i < 3; ++i) {
    clients.emplace_back([&, i] {
      auto c = server.client();
      const std::string body = json({{"prompt", "a blue square " + std::to_string(i)},
                                     {"size", "32x32"},
                                     {"num_inference_steps", 3},
                                     {"seed", 20 + i}})
                                   .dump();
      const auto r = c->Post("/v1/images/generations", body, "application/json");
      if (r && r->status == 200)
        images[i] = io::decode_png(
            base64_decode(json::parse(r->body)["data"][0]["b64_json"].get<std::string>()));
    });
  }
  for (auto& t : clients) t.join();
  const auto metrics = server.client()->Get("/metrics")->body;
  EXPECT_EQ(uploads_metric(metrics, "transformer"),
            flags[1] == "1" ? 3 : 1);  // --max-batch 1: one upload per request
  return images;
}

// Each request of a batch keeps its own seed and gets the picture it gets
// alone, within one uint8 level (Note [Phase-batched runs]).
TEST(ServerBatch, SyncImagesOfABatchAreThePicturesTheyGetAlone) {
  const auto batched = three_concurrent_images({"--max-batch", "4", "--batch-wait-ms", "2000"});
  const auto alone = three_concurrent_images({"--max-batch", "1"});
  for (std::size_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(batched[i].defined() && alone[i].defined()) << "image " << i;
    ASSERT_EQ(batched[i].sizes(), alone[i].sizes());
    const auto diff = (batched[i].to(torch::kInt32) - alone[i].to(torch::kInt32)).abs();
    EXPECT_LE(diff.max().item<int>(), 1) << "image " << i;
  }
  EXPECT_FALSE(torch::equal(batched[0], batched[1])) << "two seeds, one picture";
}

TEST(ServerBatch, BadBatchFlagsAreRejected) {
  for (const auto& flags :
       std::vector<std::vector<std::string>>{{"--max-batch", "0"}, {"--batch-wait-ms", "-1"}}) {
    // A server that accepted them would listen until `timeout` ends it (status 124).
    const std::string command = "timeout 60 " + std::string(OMNI_BINARY) +
                                " serve example:wan-shaped --port 0 " + flags[0] + " " + flags[1] +
                                " > /dev/null 2>&1";
    const int status = std::system(command.c_str());
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 124)
        << command;
  }
}

}  // namespace
}  // namespace omni::server
