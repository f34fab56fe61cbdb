#include "omni/offload/ledger.h"

#include "omni/error.h"

namespace omni::offload {

std::size_t ResidencyLedger::add(std::string name, Role role, std::uint64_t bytes, bool swappable) {
  LedgerEntry e{std::move(name), role, bytes, swappable};
  e.has_weights = bytes > 0;
  entries_.push_back(std::move(e));
  return entries_.size() - 1;
}

std::optional<std::size_t> ResidencyLedger::find(std::string_view name) const {
  for (std::size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i].name == name) return i;
  return std::nullopt;
}

std::uint64_t ResidencyLedger::resident_bytes() const {
  return resident_;
}

Residency ResidencyLedger::residency_of(const LedgerEntry& e) {
  if (!e.has_weights) return e.where;
  if (e.resident_bytes == 0) return Residency::host;
  return e.resident_bytes >= e.bytes ? Residency::device : Residency::partial;
}

void ResidencyLedger::check(std::size_t changed, std::uint64_t resident) const {
  if (limit_ > 0 && entries_[changed].has_weights) {
    const auto total = resident_ - entries_[changed].resident_bytes + resident;
    OMNI_CHECK(total <= limit_, ResidencyViolation,
               "residency invariant broken: ", to_string(entries_[changed].role), " component '",
               entries_[changed].name, "' would bring the device's resident weights to ", total,
               " bytes, over the budget of ", limit_);
  }
  if (!exclusive_) return;
  std::string dits, encoders, splits;
  int resident_dits = 0, resident_splits = 0;
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    if (incoming_ && *incoming_ == i) continue;  // Note [Components in flight]
    const auto& e = entries_[i];
    const bool on_device = i == changed ? resident > 0 : e.where != Residency::host;
    if (!on_device) continue;
    if (e.role == Role::split) {
      ++resident_splits;
      splits += (splits.empty() ? "" : ", ") + e.name;
    } else if (e.role == Role::dit) {
      ++resident_dits;
      dits += (dits.empty() ? "" : ", ") + e.name;
    } else if (e.role == Role::encoder) {
      encoders += (encoders.empty() ? "" : ", ") + e.name;
    }
  }
  OMNI_CHECK(resident_dits <= 1, ResidencyViolation,
             "residency invariant broken: several DiTs resident at once (", dits, ")");
  OMNI_CHECK(resident_splits <= 1, ResidencyViolation,
             "residency invariant broken: several split components resident at once (", splits,
             ")");
  OMNI_CHECK(resident_dits == 0 || encoders.empty(), ResidencyViolation,
             "residency invariant broken: DiT ", dits, " resident together with encoder(s) ",
             encoders);
}

void ResidencyLedger::apply(std::size_t index, std::uint64_t resident) {
  auto& e = entries_[index];
  resident_ = resident_ - e.resident_bytes + resident;
  e.resident_bytes = resident;
  const auto before = e.where;
  e.where = residency_of(e);
  if (e.where != before) {
    log_.push_back({e.name, e.where});
    if (log_.size() > kLogCapacity) log_.pop_front();
  }
  peak_ = std::max(peak_, resident_);
}

void ResidencyLedger::transition(std::size_t index, Residency to, bool teardown) {
  OMNI_INTERNAL_ASSERT(index < entries_.size());
  OMNI_INTERNAL_ASSERT(to != Residency::partial, "partial residency comes from move_bytes");
  auto& entry = entries_[index];
  if (entry.where == to) return;
  OMNI_CHECK(teardown || entry.swappable || to == Residency::device, ResidencyViolation,
             "residency invariant broken: ", to_string(entry.role), " component '", entry.name,
             "' must stay on the device and is never swapped");
  const std::uint64_t resident = to == Residency::device ? entry.bytes : 0;
  if (!entry.has_weights) {
    // No bytes: residency is a flag, checked like any other.
    check(index, to == Residency::device ? 1 : 0);
    entry.where = to;
    log_.push_back({entry.name, to});
    if (log_.size() > kLogCapacity) log_.pop_front();
    return;
  }
  check(index, resident);
  apply(index, resident);
}

void ResidencyLedger::check_move(std::size_t index, std::int64_t delta) const {
  OMNI_INTERNAL_ASSERT(index < entries_.size());
  const auto& entry = entries_[index];
  const auto resident = static_cast<std::int64_t>(entry.resident_bytes) + delta;
  OMNI_CHECK(entry.swappable || delta >= 0, ResidencyViolation,
             "residency invariant broken: ", to_string(entry.role), " component '", entry.name,
             "' must stay on the device and is never swapped");
  check(index, static_cast<std::uint64_t>(std::max<std::int64_t>(resident, 0)));
}

void ResidencyLedger::move_bytes(std::size_t index, std::int64_t delta, bool teardown) {
  OMNI_INTERNAL_ASSERT(index < entries_.size());
  auto& entry = entries_[index];
  const auto resident = static_cast<std::int64_t>(entry.resident_bytes) + delta;
  OMNI_INTERNAL_ASSERT(resident >= 0 && static_cast<std::uint64_t>(resident) <= entry.bytes,
                       "component '", entry.name, "' would hold ", resident, " of ", entry.bytes,
                       " bytes");
  OMNI_CHECK(teardown || entry.swappable || delta >= 0, ResidencyViolation,
             "residency invariant broken: ", to_string(entry.role), " component '", entry.name,
             "' must stay on the device and is never swapped");
  check(index, static_cast<std::uint64_t>(resident));
  apply(index, static_cast<std::uint64_t>(resident));
}

void ResidencyLedger::set_incoming(std::optional<std::size_t> index) {
  OMNI_INTERNAL_ASSERT(!index || *index < entries_.size());
  const auto previous = incoming_;
  incoming_ = index;
  try {
    verify();
  } catch (...) {
    incoming_ = previous;
    throw;
  }
}

void ResidencyLedger::verify() const {
  if (entries_.empty()) return;
  check(0, entries_[0].has_weights ? entries_[0].resident_bytes
                                   : (entries_[0].where != Residency::host ? 1 : 0));
}

}  // namespace omni::offload
