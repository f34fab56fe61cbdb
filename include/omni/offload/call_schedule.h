// The order in which a request calls its components, then the queued
// requests' calls, and where the run is in it.
//
//   CallSchedule s;
//   s.set({"text_encoder", "transformer", "transformer_2", "vae"});
//   s.append(next_request_calls);       // Note [Transfers for the next request]
//   s.pass("text_encoder");             // at the component's entry
//   s.name(s.current())                 // "text_encoder"
//
// The offload backend plans from it: what the next call needs, what to
// prefetch, which calls are the next request's. A call it does not have
// (the pipeline called something unplanned) drops it: the backend then
// streams without a plan.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace omni::offload {

class CallSchedule {
 public:
  // One request's calls; the position goes back to the start.
  void set(std::vector<std::string> calls);
  // Queued requests' calls, after this request's; the calls already passed
  // are dropped first.
  void append(const std::vector<std::string>& calls);
  void clear();

  bool empty() const { return calls_.empty(); }
  std::size_t size() const { return calls_.size(); }
  const std::string& name(std::size_t position) const { return calls_.at(position); }

  // Moves past the next call of `name` at or after the cursor: calls the run
  // skipped (a prompt cache hit skips the encoder) are passed over. Without
  // one, the schedule is dropped and this returns false.
  bool pass(const std::string& name);
  // The position of the next call to come.
  std::size_t cursor() const { return cursor_; }
  // The position of the call running now (0 before any or when empty).
  std::size_t current() const { return cursor_ > 0 ? cursor_ - 1 : 0; }
  // Whether the call at `position` is a queued request's.
  bool for_next_request(std::size_t position) const { return position >= request_calls_; }

 private:
  std::vector<std::string> calls_;
  std::size_t cursor_ = 0;         // the next call
  std::size_t request_calls_ = 0;  // calls_ before the queued requests'
};

}  // namespace omni::offload
