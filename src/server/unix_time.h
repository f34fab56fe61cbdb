// Wall-clock time as the API reports it (private to src/server).
#pragma once

#include <chrono>
#include <cstdint>

namespace omni::server {

// Seconds since the Unix epoch: the `created` and `started_at` fields.
inline std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace omni::server
