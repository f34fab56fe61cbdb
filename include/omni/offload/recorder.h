// The recorder (design.md §2b): what the offload report says. It counts every
// upload and offload per component, keeps the running request's transfers,
// and resolves their device timings (link time, and the part compute waited
// for: Note [Exposed and hidden transfer]) only when a report is asked for,
// so the host never blocks on a timing while it enqueues work.
//
// Residency is not recorded here: the ledger is its one store, and the
// report's `where` and peak come from it.
//
// Note [Transfers for the next request]
// A prefetch made during one request for a call of a queued one (the next
// request's encoder during this one's decode) belongs to the request that
// uses it (M8 of the GPU review): it is held aside, counted in no report
// and not waited for when this request's report is built, and joins the
// next request at begin_request().
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "omni/device/device.h"
#include "omni/offload/ledger.h"
#include "omni/offload/report.h"

namespace omni::offload {

class OffloadRecorder {
 public:
  // One row per ledger entry, in the same order.
  void add_component(const LedgerEntry& entry);
  std::size_t size() const { return stats_.size(); }

  // A new transfer record for component `index`, counted as one upload (one
  // per phase entry or swap: the groups uploaded for it add to it). Returns
  // its handle. `for_next_request`: Note [Transfers for the next request].
  std::size_t open_transfer(std::size_t index, bool for_next_request = false);
  // Adds one group's copy (bytes, pinned, and its link-time timer) to `transfer`.
  void add_copy(std::size_t transfer, std::uint64_t bytes, bool pinned,
                std::unique_ptr<device::DeviceDuration> link_time);
  // Compute waited for a copy of component `index` (exposed transfer).
  void add_wait(std::size_t index, std::unique_ptr<device::DeviceDuration> waited);
  void count_offload(std::size_t index) { ++stats_.at(index).offloads; }

  // Starts a request: its transfers list starts empty but for the held ones;
  // totals carry on. Returns each earlier transfer handle's new handle, or
  // kNoTransfer where it is gone.
  static constexpr std::size_t kNoTransfer = std::size_t(-1);
  std::vector<std::size_t> begin_request();
  // The report of the running request (per_request) or of everything since
  // the start, with residency and peak from `ledger` and host bytes given.
  OffloadReport build(bool per_request, const ResidencyLedger& ledger);
  // Forgets everything (a rollback).
  void clear();

 private:
  struct Pending {
    std::size_t transfer;  // index into transfers_, or npos for a wait
    std::size_t component;
    std::unique_ptr<device::DeviceDuration> duration;
  };
  struct Owner {
    std::size_t component;
    bool next_request;  // held aside until begin_request()
  };
  void resolve();
  bool held(const Pending& p) const;
  void count(std::size_t transfer);

  std::vector<ComponentReport> stats_;
  std::vector<ComponentReport> request_start_;
  std::vector<Transfer> transfers_;  // of the running request, and held ones
  std::vector<Owner> transfer_owner_;
  std::vector<Pending> pending_;
  std::uint64_t earlier_h2d_bytes_ = 0;
  std::uint64_t earlier_d2h_bytes_ = 0;
};

}  // namespace omni::offload
