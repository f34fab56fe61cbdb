#include "omni/offload/ledger.h"

#include "omni/error.h"

namespace omni::offload {

std::size_t ResidencyLedger::add(std::string name, Role role, std::uint64_t bytes, bool swappable) {
  entries_.push_back({std::move(name), role, bytes, swappable, Residency::host});
  return entries_.size() - 1;
}

std::optional<std::size_t> ResidencyLedger::find(std::string_view name) const {
  for (std::size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i].name == name) return i;
  return std::nullopt;
}

std::uint64_t ResidencyLedger::resident_bytes() const {
  std::uint64_t n = 0;
  for (const auto& e : entries_)
    if (e.where == Residency::device) n += e.bytes;
  return n;
}

void ResidencyLedger::check(const std::vector<LedgerEntry>& state, bool exclusive) {
  if (!exclusive) return;
  std::string dits, encoders, splits;
  int resident_dits = 0, resident_splits = 0;
  for (const auto& e : state) {
    if (e.where != Residency::device) continue;
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

void ResidencyLedger::transition(std::size_t index, Residency to, bool teardown) {
  OMNI_INTERNAL_ASSERT(index < entries_.size());
  auto& entry = entries_[index];
  if (entry.where == to) return;
  OMNI_CHECK(teardown || entry.swappable || to == Residency::device, ResidencyViolation,
             "residency invariant broken: ", to_string(entry.role), " component '", entry.name,
             "' must stay on the device and is never swapped");
  auto next = entries_;
  next[index].where = to;
  check(next, exclusive_);
  entry.where = to;
  log_.push_back({entry.name, to});
  peak_ = std::max(peak_, resident_bytes());
}

void ResidencyLedger::verify() const {
  check(entries_, exclusive_);
}

}  // namespace omni::offload
