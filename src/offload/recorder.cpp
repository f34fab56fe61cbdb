#include "omni/offload/recorder.h"

#include <algorithm>
#include <limits>

#include "omni/error.h"

namespace omni::offload {

namespace {
constexpr std::size_t kWait = std::numeric_limits<std::size_t>::max();
}

void OffloadRecorder::add_component(const LedgerEntry& entry) {
  ComponentReport r;
  r.name = entry.name;
  r.role = entry.role;
  r.bytes = entry.bytes;
  r.swappable = entry.swappable;
  stats_.push_back(std::move(r));
}

std::size_t OffloadRecorder::open_transfer(std::size_t index, bool for_next_request) {
  auto& c = stats_.at(index);
  transfers_.push_back({c.name, Direction::h2d, 0, 0.0, true});
  transfer_owner_.push_back({index, for_next_request});
  if (!for_next_request) ++c.uploads;
  return transfers_.size() - 1;
}

void OffloadRecorder::add_copy(std::size_t transfer, std::uint64_t bytes, bool pinned,
                               std::unique_ptr<device::DeviceDuration> link_time) {
  auto& t = transfers_.at(transfer);
  t.bytes += bytes;
  t.pinned = t.pinned && pinned;
  const auto owner = transfer_owner_.at(transfer);
  if (!owner.next_request) stats_.at(owner.component).upload_bytes += bytes;
  if (link_time) pending_.push_back({transfer, owner.component, std::move(link_time)});
}

bool OffloadRecorder::held(const Pending& p) const {
  return p.transfer != kWait && transfer_owner_.at(p.transfer).next_request;
}

void OffloadRecorder::add_wait(std::size_t index, std::unique_ptr<device::DeviceDuration> waited) {
  if (waited) pending_.push_back({kWait, index, std::move(waited)});
}

void OffloadRecorder::resolve() {
  std::vector<Pending> kept;
  for (auto& p : pending_) {
    if (held(p)) {  // not waited for: Note [Transfers for the next request]
      kept.push_back(std::move(p));
      continue;
    }
    const double seconds = p.duration->seconds();
    auto& c = stats_.at(p.component);
    if (p.transfer == kWait) {
      c.exposed_seconds += seconds;
    } else {
      transfers_.at(p.transfer).seconds += seconds;
      c.upload_seconds += seconds;
    }
  }
  pending_ = std::move(kept);
}

std::vector<std::size_t> OffloadRecorder::begin_request() {
  resolve();
  // Only the running request's transfers are listed; earlier ones live on
  // in the totals, so a long-running server does not accumulate them. Held
  // ones become this request's.
  std::vector<Transfer> next;
  std::vector<Owner> next_owner;
  std::vector<std::size_t> moved_to(transfers_.size(), kNoTransfer);
  for (std::size_t t = 0; t < transfers_.size(); ++t) {
    if (transfer_owner_[t].next_request) {
      moved_to[t] = next.size();
      next.push_back(transfers_[t]);
      next_owner.push_back({transfer_owner_[t].component, false});
      continue;
    }
    const auto& done = transfers_[t];
    (done.direction == Direction::h2d ? earlier_h2d_bytes_ : earlier_d2h_bytes_) += done.bytes;
  }
  for (auto& p : pending_) p.transfer = moved_to.at(p.transfer);  // all held: resolve() ran
  transfers_ = std::move(next);
  transfer_owner_ = std::move(next_owner);
  request_start_ = stats_;
  for (std::size_t t = 0; t < transfers_.size(); ++t) count(t);
  return moved_to;
}

void OffloadRecorder::count(std::size_t transfer) {
  auto& c = stats_.at(transfer_owner_.at(transfer).component);
  ++c.uploads;
  c.upload_bytes += transfers_.at(transfer).bytes;
}

OffloadReport OffloadRecorder::build(bool per_request, const ResidencyLedger& ledger) {
  resolve();
  OffloadReport r;
  r.peak_resident_bytes = ledger.peak_bytes();
  if (!per_request) {
    r.h2d_bytes = earlier_h2d_bytes_;
    r.d2h_bytes = earlier_d2h_bytes_;
  }
  for (std::size_t i = 0; i < transfers_.size(); ++i) {
    if (transfer_owner_[i].next_request) continue;
    const auto& t = transfers_[i];
    (t.direction == Direction::h2d ? r.h2d_bytes : r.d2h_bytes) += t.bytes;
    r.transfers.push_back(t);
  }
  for (std::size_t i = 0; i < stats_.size(); ++i) {
    auto stats = stats_[i];
    if (per_request && i < request_start_.size()) {
      const auto& start = request_start_[i];
      stats.uploads -= start.uploads;
      stats.offloads -= start.offloads;
      stats.upload_bytes -= start.upload_bytes;
      stats.upload_seconds -= start.upload_seconds;
      stats.exposed_seconds -= start.exposed_seconds;
    }
    // A wait longer than the copies themselves (a thread's wake-up, a busy
    // host) is not transfer: exposed is at most the link's time.
    stats.exposed_seconds = std::min(stats.exposed_seconds, stats.upload_seconds);
    stats.where = ledger.where(i);
    r.exposed_transfer_seconds += stats.exposed_seconds;
    r.hidden_transfer_seconds += stats.hidden_seconds();
    r.components.push_back(stats);
  }
  return r;
}

void OffloadRecorder::clear() {
  *this = OffloadRecorder();
}

}  // namespace omni::offload
