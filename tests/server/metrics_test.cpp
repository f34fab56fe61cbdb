// Unit tests of the Prometheus rendering (metrics.h).
#include "omni/server/metrics.h"

#include <gtest/gtest.h>

#include "server/server_process.h"

namespace omni::server {
namespace {

using testing::metric;

TEST(Metrics, CountsRequestsAndBucketsLatency) {
  Metrics m;
  m.observe_request("/v1/images/generations", "POST", 200, 0.004);
  m.observe_request("/v1/images/generations", "POST", 200, 0.3);
  m.observe_request("/v1/images/generations", "POST", 503, 0.001);
  EXPECT_EQ(m.requests("/v1/images/generations", "POST", 200), 2u);
  const auto text = m.render({2, 4, true, 0});
  EXPECT_EQ(
      metric(
          text,
          R"(omni_http_requests_total{endpoint="/v1/images/generations",method="POST",status="200"})"),
      2);
  EXPECT_EQ(
      metric(
          text,
          R"(omni_http_requests_total{endpoint="/v1/images/generations",method="POST",status="503"})"),
      1);
  const std::string bucket =
      R"(omni_http_request_duration_seconds_bucket{endpoint="/v1/images/generations",le=)";
  EXPECT_EQ(metric(text, bucket + R"("0.005"})"), 2);
  EXPECT_EQ(metric(text, bucket + R"("0.25"})"), 2);
  EXPECT_EQ(metric(text, bucket + R"("0.5"})"), 3);
  EXPECT_EQ(metric(text, bucket + R"("+Inf"})"), 3);
  EXPECT_EQ(
      metric(text,
             R"(omni_http_request_duration_seconds_count{endpoint="/v1/images/generations"})"),
      3);
  EXPECT_EQ(metric(text, "omni_queue_depth"), 2);
  EXPECT_EQ(metric(text, "omni_queue_capacity"), 4);
  EXPECT_EQ(metric(text, "omni_jobs_running"), 1);
  EXPECT_NE(text.find("# TYPE omni_http_request_duration_seconds histogram"), std::string::npos);
}

TEST(Metrics, OffloadFiguresPerComponentAndDirection) {
  offload::OffloadReport r;
  r.device = "sim";
  r.stand_in = true;
  r.strategy = "model-level";
  r.peak_resident_bytes = 1000;
  r.pinned_host_bytes = 5000;
  offload::ComponentReport te;
  te.name = "text_encoder";
  te.role = offload::Role::encoder;
  te.bytes = 400;
  te.uploads = 2;  // two requests so far
  te.upload_bytes = 800;
  te.upload_seconds = 0.75;
  r.components.push_back(te);
  r.transfers.push_back({"text_encoder", offload::Direction::h2d, 400, 0.25, true});
  Metrics m;
  m.publish_offload(OffloadFigures::from_report(r));
  r.peak_resident_bytes = 10;  // a later, smaller request keeps the peak
  m.publish_offload(OffloadFigures::from_report(r));
  const auto text = m.render({});
  EXPECT_EQ(
      metric(text,
             R"(omni_offload_transfer_bytes_total{component="text_encoder",direction="h2d"})"),
      800);
  EXPECT_EQ(
      metric(text,
             R"(omni_offload_transfer_bytes_total{component="text_encoder",direction="d2h"})"),
      0);
  EXPECT_EQ(
      metric(text,
             R"(omni_offload_transfer_seconds_total{component="text_encoder",direction="h2d"})"),
      0.75);
  EXPECT_EQ(
      metric(text, R"(omni_offload_transfers_total{component="text_encoder",direction="h2d"})"), 2);
  EXPECT_EQ(metric(text, "omni_offload_peak_resident_bytes"), 1000);
  EXPECT_EQ(metric(text, "omni_offload_pinned_host_bytes"), 5000);
  EXPECT_EQ(
      metric(text, R"(omni_device_info{device="sim",strategy="model-level",stand_in="true"})"), 1);
}

TEST(Metrics, LabelValuesAreEscaped) {
  Metrics m;
  m.observe_request("a\"b\\c\nd", "GET", 404, 0);
  EXPECT_NE(m.render({}).find(R"(endpoint="a\"b\\c\nd")"), std::string::npos);
}

}  // namespace
}  // namespace omni::server
