// Metrics: what GET /metrics reports, in Prometheus' text exposition format
// (version 0.0.4).
//
//   omni_http_requests_total{endpoint,method,status}        counter
//   omni_http_request_duration_seconds{endpoint}            histogram
//   omni_queue_depth / omni_queue_capacity / omni_jobs_running   gauges
//   omni_generations_total{kind,outcome}, omni_generation_seconds_total{kind}
//   omni_http_connections_open / omni_http_connections_max   gauges
//   omni_http_connections_refused_total                      counter
//   omni_prompt_cache_hits_total / omni_prompt_cache_misses_total  counters
//   omni_prompt_cache_bytes / omni_prompt_cache_capacity_bytes     gauges
//   omni_offload_transfer_bytes_total{component,direction}  counter
//   omni_offload_transfer_seconds_total{component,direction} counter
//   omni_offload_transfers_total{component,direction}       counter
//   omni_component_uploads_total{component}                 counter
//   omni_offload_component_bytes{component,role}            gauge
//   omni_offload_peak_resident_bytes, omni_offload_pinned_host_bytes,
//   omni_offload_pageable_host_bytes, omni_offload_planned_peak_bytes  gauges
//   omni_device_info{device,strategy,stand_in}              gauge (1)
//
// `endpoint` is the route pattern ("/v1/videos/{id}"), never the raw path, so
// the label set stays bounded whatever clients send. Thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "omni/offload/report.h"
#include "omni/pipelines/prompt_cache.h"

namespace omni::server {

// Offload figures since load, folded from Omni::offload_report() on the
// engine's thread (Note [One engine thread]).
struct OffloadFigures {
  struct Flow {
    std::uint64_t bytes = 0;
    double seconds = 0;
    std::uint64_t count = 0;
    double exposed_seconds = 0;  // of `seconds`, what compute waited for
  };
  std::string device;
  std::string strategy;
  bool stand_in = false;
  std::uint64_t peak_resident_bytes = 0;  // the largest seen by any request
  std::uint64_t planned_peak_bytes = 0;
  std::uint64_t pinned_host_bytes = 0;
  std::uint64_t pageable_host_bytes = 0;
  // (component, direction) → flow; every component appears in both directions.
  std::map<std::pair<std::string, std::string>, Flow> flows;
  // component → (role, bytes)
  std::map<std::string, std::pair<std::string, std::uint64_t>> components;

  static OffloadFigures from_report(const offload::OffloadReport& report);
};

struct QueueGauges {
  std::size_t queued = 0;
  std::size_t capacity = 0;
  std::size_t running = 0;     // jobs the engine runs now (each of a batch)
  std::size_t video_jobs = 0;  // records in the video job store
  std::size_t connections_open = 0;
  std::size_t connections_max = 0;        // --max-connections
  std::uint64_t connections_refused = 0;  // 503s past the cap, since start
};

enum class GenerationOutcome { ok, error, cancelled };

class Metrics {
 public:
  // Upper bounds of the latency histogram, in seconds (+Inf is implicit).
  static constexpr std::array<double, 15> kBuckets = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                                      2.5,   5,    10,    30,   60,  120,  300};

  void observe_request(const std::string& endpoint, const std::string& method, int status,
                       double seconds);
  // kind: "image" | "video".
  void observe_generation(const std::string& kind, GenerationOutcome outcome, double seconds);
  // Replaces the offload figures, keeping the largest peak seen so far.
  void publish_offload(OffloadFigures figures);
  // Replaces the prompt cache's counters (Omni::prompt_cache_stats, engine thread).
  void publish_prompt_cache(const pipelines::PromptCacheStats& stats);

  // Requests counted so far for (endpoint, method, status); for tests and /health.
  std::uint64_t requests(const std::string& endpoint, const std::string& method, int status) const;

  std::string render(const QueueGauges& queue) const;

 private:
  struct Histogram {
    std::array<std::uint64_t, kBuckets.size()> buckets{};  // not cumulative
    std::uint64_t count = 0;
    double sum = 0;
  };
  struct Generation {
    std::uint64_t ok = 0;
    std::uint64_t error = 0;
    std::uint64_t cancelled = 0;
    double seconds = 0;
  };

  mutable std::mutex mutex_;
  std::map<std::tuple<std::string, std::string, int>, std::uint64_t> requests_;
  std::map<std::string, Histogram> latency_;
  std::map<std::string, Generation> generations_;
  OffloadFigures offload_;
  pipelines::PromptCacheStats prompt_cache_;
};

}  // namespace omni::server
