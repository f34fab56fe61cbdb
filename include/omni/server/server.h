// omni::server::Server — an OpenAI-compatible HTTP server over one omni::Omni
// engine (design.md §4). `omni serve` is a thin wrapper around it:
//
//   omni::server::Server server({.model = "example:wan-shaped", .enable_cpu_offload = true},
//                               {.port = 0});
//   const int port = server.bind();   // 0 → a free port
//   std::thread stopper([&] { wait_for_signal(); server.stop(); });
//   server.run();                     // until stop(); then drains (--shutdown-timeout)
//
// Routes (router.h and its route files): POST /v1/images/generations; POST /v1/videos,
// GET /v1/videos, GET|DELETE /v1/videos/{id}, GET /v1/videos/{id}/content,
// POST /v1/videos/sync; GET /health, GET /v1/models, GET /metrics. Errors in
// OpenAI's shape (api_error.h). One request runs at a time on the engine's
// thread (Note [One engine thread], job_queue.h). Connections, bodies and
// request costs are bounded (Note [Hostile connections], http_server.h; Note
// [Request framing], router.cpp; Note [Request cost], request_parser.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "omni/omni.h"
#include "omni/server/request_parser.h"

namespace omni::server {

struct ServerOptions {
  std::string host = "127.0.0.1";          // loopback unless asked otherwise
  int port = 8000;                         // 0: pick a free port
  std::string api_key;                     // non-empty: /v1/* needs "Authorization: Bearer <key>"
  std::size_t max_queue = 8;               // jobs waiting for the engine
  std::uint64_t max_body_bytes = 1 << 20;  // every body, chunked or not
  int max_steps = 100;
  int max_frames = 121;
  std::uint64_t max_cost = kDefaultMaxCost;  // width × height × frames × steps × n
  std::int64_t job_ttl_seconds = 3600;       // finished video jobs are kept this long…
  std::size_t max_jobs = 64;                 // …and at most this many
  std::size_t max_connections = 128;         // open at once; past it, 503
  double receive_timeout_seconds = 30;       // for a request's head and body, from its first byte
  double shutdown_timeout_seconds = 30;      // the drain after stop(); then work is cancelled
  // Note [Phase-batched scheduling] (job_queue.h): queued requests of one
  // shape run together, up to max_batch, waiting at most batch_wait_ms for more.
  std::size_t max_batch = 4;
  int batch_wait_ms = 0;
  // ConfigError naming the bad option.
  void validate() const;
};

class Server {
 public:
  // Validates the options and loads the model on the engine's thread;
  // ConfigError, FormatError, … when that fails (nothing keeps running).
  Server(EngineArgs engine, ServerOptions options);
  // stop(), then waits for everything to finish.
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds host:port and returns the port (the chosen one for port 0).
  // ConfigError when the address cannot be bound.
  int bind();
  // Serves on the calling thread until stop(). Then drains: new jobs get
  // 503 while the running and queued ones go on, and status requests are
  // still answered, for at most shutdown_timeout_seconds; past that the
  // running job is cancelled at its next step and every queued one fails
  // with the reason (logged). Returns once the engine is idle.
  void run();
  // Starts the shutdown run() carries out. Thread-safe, returns at once; not
  // async-signal-safe (call it from a thread that waits for signals).
  void stop();

  // Whether the engine was built on a simulated stand-in device.
  bool stand_in() const;
  const std::string& model_id() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace omni::server
