// omni serve MODEL: the OpenAI-compatible HTTP server (omni::server::Server).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <iostream>
#include <thread>

#include "cli/commands.h"
#include "cli/offload_flags.h"
#include "cli/progress_bar.h"
#include "omni/error.h"
#include "omni/omni.h"

#if OMNI_WITH_SERVER
#include "omni/server/server.h"
#endif

namespace omni::cli {

#if OMNI_WITH_SERVER

namespace {

struct ServeOptions {
  std::string model;
  bool offload = false;
  bool omni_flag = false;  // vllm-omni's `--omni`: accepted, no effect
  std::string device = "auto";
  std::string dtype = "auto";
  std::string sim_memory = "64GiB";
  OffloadFlags offload_flags;
  std::string max_body = "1MiB";
  std::string prompt_cache = "256MiB";
  server::ServerOptions server;
};

// Note [Signals in omni serve]
// Libraries start threads before main (OpenBLAS' pool, for one), so a signal
// mask set here cannot cover every thread, and a blocked-and-sigwait design
// would let SIGTERM's default action kill the process through one of them.
// Instead a handler, which runs on whichever thread the kernel picks, does
// the one async-signal-safe thing: it writes the signal number to a pipe. A
// waiter thread reads it and calls ordinary code: the first signal starts the
// drain (Server::run: new jobs get 503, queued and running ones go on for at
// most --shutdown-timeout, then are cancelled; exit 0); a second one exits at
// once from the handler.
class SignalWaiter {
 public:
  SignalWaiter() {
    OMNI_CHECK(::pipe2(pipe_, O_CLOEXEC | O_NONBLOCK) == 0, ConfigError,
               "cannot create the signal pipe");
    write_end_ = pipe_[1];
    received_ = 0;
    struct sigaction action {};
    action.sa_handler = &SignalWaiter::on_signal;
    action.sa_flags = SA_RESTART;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGINT, &action, &old_int_);
    ::sigaction(SIGTERM, &action, &old_term_);
    ::signal(SIGPIPE, SIG_IGN);  // a client that hangs up must not kill the server
  }
  ~SignalWaiter() {
    stop_waiting();
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
    ::close(pipe_[0]);
    ::close(pipe_[1]);
  }
  SignalWaiter(const SignalWaiter&) = delete;
  SignalWaiter& operator=(const SignalWaiter&) = delete;

  // Calls on_first(signal) on a thread of its own when the first signal comes.
  void start(const std::function<void(int)>& on_first) {
    thread_ = std::thread([this, on_first] {
      while (!done_) {
        pollfd p{pipe_[0], POLLIN, 0};
        if (::poll(&p, 1, 100) <= 0) continue;
        unsigned char sig = 0;
        if (::read(pipe_[0], &sig, 1) == 1) on_first(sig);
      }
    });
  }
  void stop_waiting() {
    done_ = true;
    if (thread_.joinable()) thread_.join();
  }

 private:
  static void on_signal(int sig) {
    if (received_.fetch_add(1) > 0) {
      static const char message[] = "omni serve: second signal, exiting now\n";
      [[maybe_unused]] auto ignored = ::write(STDERR_FILENO, message, sizeof message - 1);
      ::_exit(1);
    }
    const unsigned char byte = static_cast<unsigned char>(sig);
    [[maybe_unused]] auto ignored = ::write(write_end_, &byte, 1);
  }

  static inline std::atomic<int> received_{0};
  static inline int write_end_ = -1;
  int pipe_[2] = {-1, -1};
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
  std::atomic<bool> done_{false};
  std::thread thread_;
};

bool is_loopback(const std::string& host) {
  return host == "127.0.0.1" || host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

int serve(ServeOptions& o) {
  EngineArgs args;
  args.model = o.model;
  args.enable_cpu_offload = o.offload;
  args.device = o.device;
  args.dtype = o.dtype;
  args.sim_memory_bytes = device::parse_byte_size(o.sim_memory);
  o.offload_flags.apply(args);
  args.prompt_cache_bytes = device::parse_byte_size(o.prompt_cache);
  o.server.max_body_bytes = device::parse_byte_size(o.max_body);
  args.offload.home_progress = [bar = std::make_shared<LoadBar>()](std::uint64_t done,
                                                                   std::uint64_t total) {
    bar->update(done, total);
  };

  SignalWaiter signals;  // Note [Signals in omni serve]
  server::Server server(args, o.server);
  if (server.stand_in())
    std::cerr << "omni serve: device sim is a simulated stand-in accelerator (host memory); its "
                 "figures are simulated\n";
  if (!is_loopback(o.server.host) && o.server.api_key.empty())
    std::cerr << "omni serve: warning: listening on " << o.server.host
              << " without --api-key: anyone who can reach it can use it\n";
  const int port = server.bind();
  signals.start([&server, timeout = o.server.shutdown_timeout_seconds](int sig) {
    std::cerr << "omni serve: " << (sig == SIGINT ? "SIGINT" : "SIGTERM")
              << ": no new requests; finishing the queued and running ones for at most " << timeout
              << " s (--shutdown-timeout)\n";
    server.stop();
  });
  std::cout << "omni serve: " << server.model_id() << " listening on http://" << o.server.host
            << ":" << port << std::endl;
  server.run();
  signals.stop_waiting();
  std::cerr << "omni serve: stopped\n";
  return 0;
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  auto* cmd = app.add_subcommand(
      "serve", "Serve a model over an OpenAI-compatible HTTP API (images and videos)");
  cmd->add_option("model", o->model,
                  "Model: a diffusers directory (model_index.json) or example:wan-shaped")
      ->required();
  cmd->add_flag("--enable-cpu-offload", o->offload,
                "Model-level offload: only the running component group stays on the device");
  cmd->add_flag("--omni", o->omni_flag, "Accepted for vllm-omni compatibility (no effect)");
  cmd->add_option("--host", o->server.host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", o->server.port, "Port (0: pick a free one and print it)")
      ->capture_default_str();
  cmd->add_option("--device", o->device, "auto | cpu | sim | cuda[:N]")->capture_default_str();
  cmd->add_option("--dtype", o->dtype,
                  "auto (each component's stored dtype) | float32 | bfloat16 | float16, or per "
                  "component: transformer=bfloat16,vae=float32")
      ->capture_default_str();
  cmd->add_option("--sim-memory", o->sim_memory, "Capacity of the sim device (e.g. 2GiB)")
      ->capture_default_str();
  o->offload_flags.add_to(*cmd);
  cmd->add_option("--api-key", o->server.api_key,
                  "Require \"Authorization: Bearer KEY\" on /v1/* (or set OMNI_API_KEY)")
      ->envname("OMNI_API_KEY");
  cmd->add_option("--max-queue", o->server.max_queue,
                  "Requests that may wait for the engine; more get 503")
      ->capture_default_str();
  cmd->add_option("--max-batch", o->server.max_batch,
                  "Queued requests of the same shape run together, each expert uploaded once "
                  "for all (1: off)")
      ->capture_default_str();
  cmd->add_option("--batch-wait-ms", o->server.batch_wait_ms,
                  "Milliseconds a batch that is not full waits for more requests of its shape")
      ->capture_default_str();
  cmd->add_option("--prompt-cache", o->prompt_cache,
                  "Bytes of text-encoder outputs kept for repeated prompts (0: off)")
      ->capture_default_str();
  cmd->add_option("--max-body", o->max_body,
                  "Largest request body, chunked or not (e.g. 1MiB); more get 413")
      ->capture_default_str();
  cmd->add_option("--max-steps", o->server.max_steps, "Largest num_inference_steps accepted")
      ->capture_default_str();
  cmd->add_option("--max-frames", o->server.max_frames, "Largest num_frames accepted")
      ->capture_default_str();
  cmd->add_option("--max-cost", o->server.max_cost,
                  "Largest width x height x frames x steps x n of a request (default: 1280x720, "
                  "81 frames, 40 steps); more get 422")
      ->capture_default_str();
  cmd->add_option("--max-connections", o->server.max_connections,
                  "Connections served at once; more get 503")
      ->capture_default_str();
  cmd->add_option("--receive-timeout", o->server.receive_timeout_seconds,
                  "Seconds a request's headers and body may take to arrive; then 408")
      ->capture_default_str();
  cmd->add_option("--shutdown-timeout", o->server.shutdown_timeout_seconds,
                  "Seconds SIGTERM/SIGINT lets queued and running requests finish; then they "
                  "are cancelled")
      ->capture_default_str();
  cmd->add_option("--job-ttl", o->server.job_ttl_seconds,
                  "Seconds a finished video job (and its MP4) is kept")
      ->capture_default_str();
  cmd->add_option("--max-jobs", o->server.max_jobs, "Finished video jobs kept at most")
      ->capture_default_str();
  cmd->callback([o] { std::exit(run_guarded([&] { return serve(*o); })); });
}

#else  // !OMNI_WITH_SERVER

void add_serve_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "Serve a model over HTTP (not in this build)");
  cmd->allow_extras();
  cmd->callback([] {
    std::cerr << "omni: this omni was built without the HTTP server (OMNI_WITH_SERVER=OFF)\n";
    std::exit(2);
  });
}

#endif

}  // namespace omni::cli
