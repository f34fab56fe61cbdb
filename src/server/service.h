// What the route handlers share (private to src/server).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "omni/pipelines/pipeline.h"
#include "omni/server/job_queue.h"
#include "omni/server/metrics.h"
#include "omni/server/request_parser.h"
#include "omni/server/server.h"
#include "omni/server/video_jobs.h"

namespace omni::server {

class HttpServer;

// Members are destroyed bottom-up: the queue (and with it the engine's
// thread) goes first, while the job store and metrics its jobs touch still
// exist.
struct Service {
  ServerOptions options;
  RequestLimits limits;
  std::string model_id;
  std::int64_t started_at = 0;  // unix seconds
  bool stand_in = false;
  bool video_supported = false;
  std::string device_name;
  // Note [Resolve off the engine thread]
  // Pipeline::resolve is a const function of the request and the pipeline's
  // configuration (it touches no tensor and no offload state), so HTTP
  // threads call it to reject invalid values with 422 before they take a
  // queue slot. Everything else about the engine stays on its thread. The
  // pipeline lives as long as the queue's engine, which outlives every
  // handler (Server::run stops HTTP before the queue).
  const pipelines::Pipeline* pipeline = nullptr;
  const HttpServer* http = nullptr;            // for the connection gauges
  std::atomic<std::uint64_t> next_request{0};  // ids of sync jobs, for cancel()
  Metrics metrics;
  VideoJobStore videos;
  std::unique_ptr<JobQueue> queue;

  explicit Service(ServerOptions o)
      : options(std::move(o)),
        limits{options.max_steps, options.max_frames, options.max_cost},
        videos(std::chrono::seconds(options.job_ttl_seconds), options.max_jobs) {}
};

}  // namespace omni::server
