// Injected faults, for tests only: not part of any public options.
//
//   omni::fault::Faults faults;
//   faults.fail_allocation_number = 3;
//   omni::fault::ScopedFaults armed(faults);   // until the end of the scope
//   EXPECT_THROW(backend.enable(...), DeviceOutOfMemory);
//
// Note [Fault injection]
// Tests prove that every path unwinds by making the host refuse to pin, the
// device refuse an allocation, or a hook installation fail. Devices and
// backends read the armed faults where the fault would happen, counting with
// their own counters (the N-th allocation of *that* device). Outside a
// ScopedFaults nothing is armed and the check is one relaxed atomic load.
#pragma once

#include <cstdint>
#include <optional>

namespace omni::fault {

struct Faults {
  // Host bytes a device lets you pin before it refuses (sim and cuda).
  std::optional<std::uint64_t> pin_budget_bytes;
  // Fail a device's N-th allocation (1-based) with DeviceOutOfMemory.
  std::optional<int> fail_allocation_number;
  // Fail a device's N-th host-to-device copy (1-based) with omni::Error, as a
  // failed cudaMemcpyAsync does: not an out-of-memory, nothing is enqueued.
  std::optional<int> fail_copy_number;
  // Make an offload backend's N-th hook installation (1-based) throw.
  std::optional<int> fail_hook_install_number;
};

// The faults armed now; none outside a ScopedFaults. Any thread.
Faults armed_faults();

// Arms `faults` for its lifetime, then restores what was armed before.
// Scopes nest; arm them from one thread at a time (a test's).
class ScopedFaults {
 public:
  explicit ScopedFaults(const Faults& faults);
  ~ScopedFaults();
  ScopedFaults(const ScopedFaults&) = delete;
  ScopedFaults& operator=(const ScopedFaults&) = delete;

 private:
  Faults previous_;
  bool previously_armed_;
};

}  // namespace omni::fault
