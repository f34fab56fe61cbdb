// Cancellation: how a request is stopped before it finishes. Whoever wants it
// stopped (an HTTP thread whose client went away, DELETE /v1/videos/{id}, a
// shutdown past --shutdown-timeout) calls cancel(); the job's progress
// callback, on the engine's thread, calls throw_if_cancelled() after every
// denoising step, which throws omni::Cancelled (error.h): the request stops
// at its next step and the engine stays usable. Thread-safe.
#pragma once

#include <atomic>
#include <string_view>

namespace omni::server {

enum class CancelReason {
  none,
  client_disconnected,  // a sync request's client closed its connection
  deleted,              // DELETE /v1/videos/{id} while it ran
  shutdown,             // the server stopped and --shutdown-timeout passed
};

// What a client or the log is told.
std::string_view describe(CancelReason reason);

class Cancellation {
 public:
  // The first reason wins; later calls change nothing.
  void cancel(CancelReason reason) noexcept;
  bool cancelled() const noexcept { return reason() != CancelReason::none; }
  CancelReason reason() const noexcept { return reason_.load(); }
  // omni::Cancelled with describe(reason()) when cancelled.
  void throw_if_cancelled() const;

 private:
  std::atomic<CancelReason> reason_{CancelReason::none};
};

}  // namespace omni::server
