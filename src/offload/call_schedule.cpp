#include "omni/offload/call_schedule.h"

#include <algorithm>
#include <iterator>

namespace omni::offload {

void CallSchedule::set(std::vector<std::string> calls) {
  calls_ = std::move(calls);
  cursor_ = 0;
  request_calls_ = calls_.size();
}

void CallSchedule::append(const std::vector<std::string>& calls) {
  if (cursor_ > 0) {
    calls_.erase(calls_.begin(), calls_.begin() + static_cast<std::ptrdiff_t>(cursor_));
    request_calls_ -= std::min(request_calls_, cursor_);
    cursor_ = 0;
  }
  calls_.insert(calls_.end(), calls.begin(), calls.end());
}

void CallSchedule::clear() {
  calls_.clear();
  cursor_ = 0;
  request_calls_ = 0;
}

bool CallSchedule::pass(const std::string& name) {
  const auto call =
      std::find(calls_.begin() + static_cast<std::ptrdiff_t>(cursor_), calls_.end(), name);
  if (call == calls_.end()) {
    clear();
    return false;
  }
  cursor_ = static_cast<std::size_t>(call - calls_.begin()) + 1;
  return true;
}

}  // namespace omni::offload
