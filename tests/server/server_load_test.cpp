// The real `omni serve` under load, over many requests, and while it shuts
// down. Every loop here is bounded and ends by itself.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <latch>
#include <mutex>
#include <thread>
#include <vector>

#include "omni/io/image_writer.h"
#include "server/server_process.h"

namespace omni::server {
namespace {

using nlohmann::json;
using namespace testing;

const std::string kLoadImage =
    R"({"prompt": "a red circle", "size": "32x32", "num_inference_steps": 4, "seed": 1})";

std::uint64_t images_with_status(const std::string& metrics, int status) {
  return static_cast<std::uint64_t>(
      metric(
          metrics,
          R"(omni_http_requests_total{endpoint="/v1/images/generations",method="POST",status=")" +
              std::to_string(status) + "\"}")
          .value_or(0));
}

TEST(ServerLoad, ThirtyTwoClientsAgainstAQueueOfFour) {
  ServerProcess server({"--max-queue", "4"});
  constexpr int kClients = 32;
  struct Outcome {
    httplib::Error error = httplib::Error::Unknown;
    int status = 0;
    std::string body;
    std::string retry_after;
  };
  std::vector<Outcome> outcomes(kClients);
  std::latch start(kClients);
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&, i] {
      auto c = server.client();
      start.arrive_and_wait();  // all at once
      const auto r = c->Post("/v1/images/generations", kLoadImage, "application/json");
      outcomes[i].error = r.error();
      if (r) {
        outcomes[i].status = r->status;
        outcomes[i].body = r->body;
        outcomes[i].retry_after = r->get_header_value("Retry-After");
      }
    });
  }
  for (auto& t : clients) t.join();

  int ok = 0, busy = 0;
  for (const auto& o : outcomes) {
    ASSERT_EQ(o.error, httplib::Error::Success) << httplib::to_string(o.error);  // no resets
    ASSERT_TRUE(o.status == 200 || o.status == 503) << o.status << " " << o.body;
    if (o.status == 200) {
      ++ok;
      const auto png = json::parse(o.body)["data"][0]["b64_json"].get<std::string>();
      EXPECT_EQ(io::decode_png(base64_decode(png)).sizes(), (std::vector<std::int64_t>{32, 32, 3}));
    } else {
      ++busy;
      EXPECT_EQ(o.retry_after, "1");
      EXPECT_EQ(json::parse(o.body)["error"]["code"], "queue_full");
    }
  }
  std::cerr << "32 clients, --max-queue 4: " << ok << " served, " << busy << " got 503\n";
  // The first four always fit in the queue (a fifth does when the worker
  // already took the first one out).
  EXPECT_GE(ok, 4);
  EXPECT_GE(busy, 1);

  auto c = server.client();
  // The worker marks itself idle just after it delivered the last answer.
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (json::parse(c->Get("/health")->body)["queue"]["running"] == true &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  const auto metrics = c->Get("/metrics")->body;
  EXPECT_EQ(images_with_status(metrics, 200), static_cast<std::uint64_t>(ok));
  EXPECT_EQ(images_with_status(metrics, 503), static_cast<std::uint64_t>(busy));
  EXPECT_EQ(metric(metrics, R"(omni_generations_total{kind="image",outcome="ok"})"), ok);
  EXPECT_EQ(metric(metrics, R"(omni_generations_total{kind="image",outcome="error"})"), 0);
  EXPECT_EQ(
      metric(metrics,
             R"(omni_http_request_duration_seconds_count{endpoint="/v1/images/generations"})"),
      kClients);
  EXPECT_EQ(metric(metrics, "omni_queue_depth"), 0);
  EXPECT_EQ(metric(metrics, "omni_jobs_running"), 0);
  EXPECT_EQ(metrics.find("status=\"500\""), std::string::npos);
}

TEST(ServerLoad, MemoryDoesNotGrowOverAHundredRequests) {
  ServerProcess server;
  auto c = server.client();
  const std::string request =
      R"({"prompt": "a red circle", "size": "32x32", "num_inference_steps": 2})";
  auto run = [&](int count) {
    for (int i = 0; i < count; ++i) {
      const auto r = c->Post("/v1/images/generations", request, "application/json");
      ASSERT_TRUE(r);
      ASSERT_EQ(r->status, 200) << r->body;
      if (i % 10 == 0) ASSERT_EQ(c->Get("/metrics")->status, 200);
    }
  };
  run(20);  // warm-up: allocator pools, thread arenas, lazily built kernels
  // A leak grows the same amount every round; the allocator's arenas settle
  // in one step (CI once saw 16.7 MiB over a single round of 100). So the
  // smaller growth of two later rounds must be small, while the whole stays
  // bounded.
  constexpr int kRound = 60;
  std::vector<double> rss_mib{static_cast<double>(server.rss_bytes()) / (1 << 20)};
  ASSERT_GT(rss_mib[0], 0.0);
  const auto start = std::chrono::steady_clock::now();
  for (int round = 0; round < 3; ++round) {
    run(kRound);
    rss_mib.push_back(static_cast<double>(server.rss_bytes()) / (1 << 20));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cerr << "RSS after warm-up " << rss_mib[0] << " MiB; after rounds of " << kRound
            << " requests " << rss_mib[1] << ", " << rss_mib[2] << ", " << rss_mib[3] << " MiB; "
            << seconds * 1000 / (3 * kRound) << " ms per image request\n";
  const double late_growth = std::min(rss_mib[2] - rss_mib[1], rss_mib[3] - rss_mib[2]);
#ifdef __SANITIZE_ADDRESS__
  constexpr double kLateGrowthMiB = 16.0;  // ASan's quarantine keeps filling for a while
#else
  constexpr double kLateGrowthMiB = 4.0;
#endif
  EXPECT_LT(late_growth, kLateGrowthMiB) << "RSS grows every round: a leak";
#ifdef __SANITIZE_ADDRESS__
  // ASan's quarantine keeps up to 256 MiB of freed memory (quarantine_size_mb)
  // before reusing it: a cold CI run saw 625 -> 855 -> 871 -> 880 MiB. The
  // leak check is the late growth above.
  constexpr double kTotalGrowthMiB = 48.0 + 256.0;
#else
  constexpr double kTotalGrowthMiB = 48.0;
#endif
  EXPECT_LT(rss_mib[3] - rss_mib[0], kTotalGrowthMiB);
}

TEST(ServerShutdown, SigtermLetsTheRunningRequestFinish) {
  ServerProcess server;
  int status = 0;
  std::string body;
  std::thread client([&] {
    auto c = server.client();
    const auto r = c->Post("/v1/images/generations",
                           R"({"prompt": "slow", "size": "64x64", "num_inference_steps": 10})",
                           "application/json");
    status = r ? r->status : -1;
    if (r) body = r->body;
  });
  auto probe = server.client();
  bool running = false;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!running && std::chrono::steady_clock::now() < deadline) {
    const auto r = probe->Get("/health");
    running = r && json::parse(r->body)["queue"]["running"] == true;
    if (!running) std::this_thread::sleep_for(2ms);
  }
  ASSERT_TRUE(running);
  const auto exit_status = server.signal_and_wait(SIGTERM);
  client.join();
  EXPECT_EQ(exit_status, 0) << server.stderr_text();
  EXPECT_EQ(status, 200) << body;
  if (status == 200) {
    const auto png = json::parse(body)["data"][0]["b64_json"].get<std::string>();
    EXPECT_EQ(io::decode_png(base64_decode(png)).sizes(), (std::vector<std::int64_t>{64, 64, 3}));
  }
  EXPECT_NE(server.stderr_text().find("SIGTERM"), std::string::npos);
}

TEST(ServerShutdown, SigintOnAnIdleServerExitsZero) {
  ServerProcess server;
  ASSERT_EQ(server.client()->Get("/health")->status, 200);
  EXPECT_EQ(server.signal_and_wait(SIGINT, 30s), 0) << server.stderr_text();
  // It no longer accepts connections.
  auto c = server.client();
  c->set_connection_timeout(1, 0);
  EXPECT_FALSE(c->Get("/health"));
}

}  // namespace
}  // namespace omni::server
