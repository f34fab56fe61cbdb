#include "omni/server/server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "http_reply.h"
#include "http_server.h"
#include "omni/error.h"
#include "omni/io/video_writer.h"
#include "router.h"
#include "service.h"
#include "unix_time.h"

namespace omni::server {

void ServerOptions::validate() const {
  OMNI_CHECK(!host.empty(), ConfigError, "--host must not be empty");
  OMNI_CHECK(port >= 0 && port <= 65535, ConfigError, "--port must be in 0..65535, got ", port);
  OMNI_CHECK(max_queue >= 1 && max_queue <= 100000, ConfigError,
             "--max-queue must be in 1..100000, got ", max_queue);
  OMNI_CHECK(max_body_bytes >= 1024, ConfigError, "--max-body must be at least 1 KiB, got ",
             max_body_bytes);
  OMNI_CHECK(max_steps >= 1, ConfigError, "--max-steps must be at least 1, got ", max_steps);
  OMNI_CHECK(max_frames >= 1, ConfigError, "--max-frames must be at least 1, got ", max_frames);
  OMNI_CHECK(job_ttl_seconds >= 1, ConfigError, "--job-ttl must be at least 1 second, got ",
             job_ttl_seconds);
  OMNI_CHECK(max_jobs >= 1, ConfigError, "--max-jobs must be at least 1, got ", max_jobs);
  OMNI_CHECK(max_cost >= 1, ConfigError, "--max-cost must be at least 1, got ", max_cost);
  OMNI_CHECK(max_connections >= 2 && max_connections <= 4096, ConfigError,
             "--max-connections must be in 2..4096, got ", max_connections);
  OMNI_CHECK(receive_timeout_seconds > 0 && receive_timeout_seconds <= 3600, ConfigError,
             "--receive-timeout must be in (0, 3600] seconds, got ", receive_timeout_seconds);
  OMNI_CHECK(shutdown_timeout_seconds >= 0 && shutdown_timeout_seconds <= 86400, ConfigError,
             "--shutdown-timeout must be in [0, 86400] seconds, got ", shutdown_timeout_seconds);
  OMNI_CHECK(max_batch >= 1 && max_batch <= 64, ConfigError, "--max-batch must be in 1..64, got ",
             max_batch);
  OMNI_CHECK(batch_wait_ms >= 0 && batch_wait_ms <= 60000, ConfigError,
             "--batch-wait-ms must be in 0..60000, got ", batch_wait_ms);
}

namespace {

// httplib's thread pool, plus a hook on the accept loop's idle ticks: that is
// where a stop() that came before the loop started takes effect.
class ServerTaskQueue : public httplib::TaskQueue {
 public:
  ServerTaskQueue(std::size_t threads, std::function<void()> on_idle)
      : pool_(threads), on_idle_(std::move(on_idle)) {}
  void enqueue(std::function<void()> fn) override { pool_.enqueue(std::move(fn)); }
  void shutdown() override { pool_.shutdown(); }
  void on_idle() override { on_idle_(); }

 private:
  httplib::ThreadPool pool_;
  std::function<void()> on_idle_;
};

std::chrono::milliseconds milliseconds(double seconds) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000));
}

ConnectionLimits connection_limits(const ServerOptions& o) {
  ConnectionLimits limits;
  limits.max_connections = o.max_connections;
  limits.receive_timeout = milliseconds(o.receive_timeout_seconds);
  // The head's allowance (64 KiB at most: Note [Request head]) and the body,
  // with room for chunk framing (Note [Hostile connections]).
  limits.max_request_bytes = (64u << 10) + 2 * o.max_body_bytes;
  return limits;
}

}  // namespace

struct Server::State {
  explicit State(ServerOptions options)
      : service(std::move(options)), http(connection_limits(service.options)) {}

  // Stops httplib's accept loop once it runs (its stop() is a no-op before).
  void stop_http() {
    std::lock_guard lock(stop_mutex);
    if (http_stopped || !http.is_running()) return;
    http.stop();
    http_stopped = true;
  }

  // The shutdown (Server::run's comment): waits for stop(), drains, then stops HTTP.
  void drain() {
    {
      std::unique_lock lock(stop_mutex);
      stop_wanted.wait(lock, [&] { return stop_requested.load(); });
    }
    auto& s = service;
    const auto deadline =
        std::chrono::steady_clock::now() + milliseconds(s.options.shutdown_timeout_seconds);
    s.videos.begin_drain();
    const auto q = s.queue->stats();
    if (q.running || q.queued > 0)
      log_line(detail::concat("draining: ", q.running ? 1 : 0, " running, ", q.queued,
                              " queued; at most ", s.options.shutdown_timeout_seconds,
                              " s (--shutdown-timeout)"));
    if (!s.queue->wait_idle(milliseconds(s.options.shutdown_timeout_seconds))) {
      const auto left = s.queue->stats();
      log_line(detail::concat("--shutdown-timeout passed: cancelling the running request and ",
                              left.queued, " queued"));
      s.queue->abort(CancelReason::shutdown);
      // The running job stops at its next step; a second signal exits at once.
      while (!s.queue->wait_idle(std::chrono::seconds(1))) {
      }
    }
    keep_finished_videos(deadline);
    stop_http_requested = true;
    stop_http();
  }

  // Serves on until the video jobs that finished while draining are
  // fetched, at most until `deadline` (Note [Jobs finished while draining]).
  void keep_finished_videos(std::chrono::steady_clock::time_point deadline) {
    auto& videos = service.videos;
    std::size_t waiting = videos.awaiting_fetch();
    if (waiting == 0 || std::chrono::steady_clock::now() >= deadline) return;
    log_line(detail::concat("keeping ", waiting,
                            " video job(s) that finished while draining until they are fetched, "
                            "at most until --shutdown-timeout passes"));
    while (waiting > 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      waiting = videos.awaiting_fetch();
    }
    if (waiting > 0)
      log_line(detail::concat("--shutdown-timeout passed: ", waiting,
                              " finished video job(s) were never fetched"));
  }

  Service service;
  HttpServer http;  // after `service`: its handlers refer to it
  std::unique_ptr<RouteTable> routes;
  std::mutex stop_mutex;
  std::condition_variable stop_wanted;
  std::atomic<bool> stop_requested{false};
  std::atomic<bool> stop_http_requested{false};
  bool http_stopped = false;
  bool bound = false;
  int listen_fd = -1;  // the socket httplib binds (set while it creates it)
};

Server::Server(EngineArgs engine, ServerOptions options) {
  options.validate();
  engine.validate();
  state_ = std::make_unique<State>(std::move(options));
  auto& s = state_->service;
  s.http = &state_->http;
  const std::size_t threads = state_->http.pool_threads();
  s.model_id = engine.model;
  s.started_at = unix_now();
  s.video_supported = io::video_supported();
  s.queue = std::make_unique<JobQueue>(
      [&s, engine]() {
        auto omni = std::make_unique<Omni>(engine);
        s.pipeline = &omni->pipeline();
        s.stand_in = omni->device().is_stand_in();
        s.device_name = omni->device().name();
        return omni;
      },
      s.options.max_queue,
      [&s](Omni& omni) {
        s.metrics.publish_offload(OffloadFigures::from_report(omni.offload_report()));
      },
      BatchOptions{s.options.max_batch, std::chrono::milliseconds(s.options.batch_wait_ms)});

  auto& http = state_->http;
  State* state = state_.get();
  http.new_task_queue = [threads, state] {
    return new ServerTaskQueue(threads, [state] {
      if (state->stop_http_requested) state->stop_http();
    });
  };
  // Note [Listen socket]
  // httplib's default options set SO_REUSEPORT, which lets a second server
  // bind a port in use and silently split its traffic; we want that to be an
  // error, and only SO_REUSEADDR (a quick restart). We also keep the socket
  // to widen httplib's listen backlog of 5, which drops connections from
  // bursts of clients (the kernel's accept queue overflows).
  http.set_socket_options([state](int sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    state->listen_fd = sock;
  });
  http.set_idle_interval(0, 100'000);
  http.set_payload_max_length(static_cast<std::size_t>(s.options.max_body_bytes));
  http.set_keep_alive_timeout(2);
  state_->routes = install_routes(http, s);
}

Server::~Server() {
  stop();
  state_->stop_http();
  state_->service.queue->shutdown();
}

int Server::bind() {
  auto& s = state_->service;
  OMNI_CHECK(!state_->bound, ConfigError, "the server is already bound");
  int port = s.options.port;
  if (port == 0)
    port = state_->http.bind_to_any_port(s.options.host);
  else if (!state_->http.bind_to_port(s.options.host, port))
    port = -1;
  OMNI_CHECK(port > 0, ConfigError, "cannot listen on ", s.options.host, ":", s.options.port,
             " (the port is in use, or the host is not an address of this machine)");
  // listen() again on a listening socket only changes its backlog (Note [Listen socket]).
  if (state_->listen_fd >= 0) ::listen(state_->listen_fd, SOMAXCONN);
  state_->bound = true;
  return port;
}

void Server::run() {
  OMNI_INTERNAL_ASSERT(state_->bound, "Server::run before bind");
  std::thread drainer([state = state_.get()] { state->drain(); });
  state_->http.listen_after_bind();
  stop();  // HTTP ended by itself (the socket failed): drain all the same
  drainer.join();
  // Every HTTP thread has returned and the queue is idle.
  state_->service.queue->shutdown();
}

void Server::stop() {
  {
    std::lock_guard lock(state_->stop_mutex);
    state_->stop_requested = true;
  }
  state_->stop_wanted.notify_all();
  state_->service.queue->close();
}

bool Server::stand_in() const {
  return state_->service.stand_in;
}
const std::string& Server::model_id() const {
  return state_->service.model_id;
}

}  // namespace omni::server
