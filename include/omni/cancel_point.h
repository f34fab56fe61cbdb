// Cancel points inside a denoising step.
//
//   omni::ScopedCancelCheck check([&] { if (stop_requested) throw omni::Cancelled("..."); });
//   engine.generate(request);   // the models call omni::cancel_point() as they go
//
// Note [Cancel points inside a step]
// A request used to stop only between denoising steps, through its progress
// callback, and at the sizes --max-cost admits one step on a CPU takes
// minutes (D3 of the third attack: a deleted job held the engine for over
// 4.5 min). Whoever drives a generation may install a check on its thread;
// the models call cancel_point() at every transformer and text-encoder
// block, every query chunk of the eager attention, and every VAE frame,
// encode chunk and tile. The check throws (Cancelled) to stop the run there:
// the offload hooks are exception-safe (exit hooks run, the ledger stays
// consistent) and the next request runs as usual. With no check installed a
// cancel point is one thread-local load. Checks nest: the innermost wins
// until its scope ends.
#pragma once

#include <functional>
#include <utility>

namespace omni {

using CancelCheck = std::function<void()>;

namespace detail {
inline thread_local const CancelCheck* current_cancel_check = nullptr;
}  // namespace detail

// Runs this thread's check, if any; may throw what the check throws.
inline void cancel_point() {
  if (const auto* check = detail::current_cancel_check) (*check)();
}

// Installs `check` on this thread for the scope's lifetime (an empty one
// installs nothing).
class ScopedCancelCheck {
 public:
  explicit ScopedCancelCheck(CancelCheck check)
      : check_(std::move(check)), previous_(detail::current_cancel_check) {
    if (check_) detail::current_cancel_check = &check_;
  }
  ~ScopedCancelCheck() { detail::current_cancel_check = previous_; }
  ScopedCancelCheck(const ScopedCancelCheck&) = delete;
  ScopedCancelCheck& operator=(const ScopedCancelCheck&) = delete;

 private:
  CancelCheck check_;
  const CancelCheck* previous_;
};

}  // namespace omni
