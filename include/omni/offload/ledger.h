// The residency ledger (design.md §2 rule 8): which component is where, how
// many device bytes its weights hold, and the invariant of rule 2 checked on
// every transition, before it is applied.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "omni/offload/components.h"

namespace omni::offload {

struct LedgerEntry {
  std::string name;
  Role role;
  std::uint64_t bytes = 0;
  bool swappable = false;
  Residency where = Residency::host;
};

struct ResidencyEvent {
  std::string component;
  Residency to;
  bool operator==(const ResidencyEvent&) const = default;
};

class ResidencyLedger {
 public:
  // `exclusive`: enforce rule 2 (model-level offload). Without it any
  // combination is allowed (everything resident, no offload).
  explicit ResidencyLedger(bool exclusive) : exclusive_(exclusive) {}

  std::size_t add(std::string name, Role role, std::uint64_t bytes, bool swappable);

  // Moves component `index` to `to`. Throws ResidencyViolation, leaving the
  // ledger unchanged, when the new state would break the invariant: a DiT
  // resident with an encoder or with another DiT, or a VAE/resident module
  // leaving the device (unless `teardown`).
  void transition(std::size_t index, Residency to, bool teardown = false);

  // Throws ResidencyViolation naming the offenders if the current state breaks the invariant.
  void verify() const;

  const std::vector<LedgerEntry>& entries() const { return entries_; }
  std::optional<std::size_t> find(std::string_view name) const;
  std::uint64_t resident_bytes() const;
  std::uint64_t peak_bytes() const { return peak_; }
  void reset_peak() { peak_ = resident_bytes(); }
  const std::vector<ResidencyEvent>& log() const { return log_; }
  void clear_log() { log_.clear(); }

 private:
  static void check(const std::vector<LedgerEntry>& state, bool exclusive);
  bool exclusive_;
  std::vector<LedgerEntry> entries_;
  std::vector<ResidencyEvent> log_;
  std::uint64_t peak_ = 0;
};

}  // namespace omni::offload
