// The residency ledger (design.md §2 rule 8): the one store of which
// component is where and how many device bytes its weights hold, block group
// by block group, with the invariant of rule 2 checked on every transition,
// before it is applied.
//
// Note [Components in flight]
// Streaming (backend.h) lets the next phase's component arrive while the
// current one runs: prefetched whole when the device holds both, or block by
// block into the space the running expert frees after each block's last use.
// The seed's invariant then reads: while a DiT runs, no encoder is resident
// and no other DiT has blocks resident, except the one component in flight
// for the next phase (`incoming`). The ledger checks the state without that
// component against the strict rules.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "omni/offload/components.h"

namespace omni::offload {

struct LedgerEntry {
  std::string name;
  Role role;
  std::uint64_t bytes = 0;  // all of its weights
  bool swappable = false;
  std::uint64_t resident_bytes = 0;  // of its block groups on the device now
  bool has_weights = true;           // false: no bytes, resident as a whole or not at all
  Residency where = Residency::host;
};

struct ResidencyEvent {
  std::string component;
  Residency to;
  bool operator==(const ResidencyEvent&) const = default;
};

class ResidencyLedger {
 public:
  // The log keeps the latest transitions only (a server runs for months).
  static constexpr std::size_t kLogCapacity = 4096;

  // `exclusive`: enforce rule 2 (model-level offload). `limit_bytes` > 0:
  // resident bytes never exceed it (the budget policy). Without either any
  // combination is allowed (everything resident, no offload).
  explicit ResidencyLedger(bool exclusive, std::uint64_t limit_bytes = 0)
      : exclusive_(exclusive), limit_(limit_bytes) {}

  std::size_t add(std::string name, Role role, std::uint64_t bytes, bool swappable);
  // Resident bytes may not exceed `limit_bytes` from now on (0: no limit).
  void set_limit(std::uint64_t limit_bytes) { limit_ = limit_bytes; }

  // Moves all of component `index` to `to`. Throws ResidencyViolation,
  // leaving the ledger unchanged, when the new state would break the
  // invariant: a DiT resident with an encoder or with another DiT (Note
  // [Components in flight]), more than the limit resident, or a component
  // that is not swappable leaving the device (unless `teardown`).
  void transition(std::size_t index, Residency to, bool teardown = false);
  // Block groups of component `index` arrived (`delta` > 0) or left (< 0);
  // the same checks as transition().
  void move_bytes(std::size_t index, std::int64_t delta, bool teardown = false);
  // Throws what move_bytes would, changing nothing.
  void check_move(std::size_t index, std::int64_t delta) const;

  // The component in flight for the next phase, if any (Note [Components in
  // flight]). Clearing it checks the strict invariant.
  void set_incoming(std::optional<std::size_t> index);
  std::optional<std::size_t> incoming() const { return incoming_; }

  // Throws ResidencyViolation naming the offenders if the current state breaks the invariant.
  void verify() const;

  const std::vector<LedgerEntry>& entries() const { return entries_; }
  std::optional<std::size_t> find(std::string_view name) const;
  Residency where(std::size_t index) const { return entries_.at(index).where; }
  std::uint64_t resident_bytes() const;
  std::uint64_t peak_bytes() const { return peak_; }
  void reset_peak() { peak_ = resident_bytes(); }
  // The latest transitions (at most kLogCapacity), oldest first.
  std::vector<ResidencyEvent> log() const { return {log_.begin(), log_.end()}; }
  void clear_log() { log_.clear(); }

 private:
  static Residency residency_of(const LedgerEntry& e);
  // Checks the state in which entry `index` holds `resident` bytes.
  void check(std::size_t index, std::uint64_t resident) const;
  void apply(std::size_t index, std::uint64_t resident);

  bool exclusive_;
  std::uint64_t limit_;
  std::vector<LedgerEntry> entries_;
  std::optional<std::size_t> incoming_;
  std::deque<ResidencyEvent> log_;
  std::uint64_t peak_ = 0;
  std::uint64_t resident_ = 0;
};

}  // namespace omni::offload
