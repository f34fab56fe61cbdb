#include "omni/server/cancellation.h"

#include <string>

#include "omni/error.h"

namespace omni::server {

std::string_view describe(CancelReason reason) {
  switch (reason) {
    case CancelReason::none:
      return "not cancelled";
    case CancelReason::client_disconnected:
      return "the client disconnected";
    case CancelReason::deleted:
      return "the video job was deleted";
    case CancelReason::shutdown:
      return "the server shut down (--shutdown-timeout passed)";
  }
  return "cancelled";
}

void Cancellation::cancel(CancelReason reason) noexcept {
  if (reason == CancelReason::none) return;
  CancelReason expected = CancelReason::none;
  reason_.compare_exchange_strong(expected, reason);
}

void Cancellation::throw_if_cancelled() const {
  const auto r = reason();
  if (r != CancelReason::none) throw Cancelled(std::string(describe(r)));
}

}  // namespace omni::server
