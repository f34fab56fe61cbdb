#include "omni/offload/backend.h"

#include <algorithm>
#include <iostream>
#include <map>
#include <utility>

#include "offload/rebind.h"
#include "omni/error.h"
#include "omni/offload/auto_plan.h"
#include "testing/fault_injection.h"

namespace omni::offload {

std::uint64_t planned_model_level_peak(const std::vector<std::pair<Role, std::uint64_t>>& sizes) {
  std::uint64_t encoders = 0, largest_dit = 0, largest_split = 0, statics = 0;
  for (const auto& [role, bytes] : sizes) {
    switch (role) {
      case Role::encoder:
        encoders += bytes;
        break;
      case Role::dit:
        largest_dit = std::max(largest_dit, bytes);
        break;
      case Role::split:
        largest_split = std::max(largest_split, bytes);
        break;
      case Role::vae:
      case Role::resident:
        statics += bytes;
        break;
    }
  }
  return std::max({encoders, largest_dit, largest_split}) + statics;
}

OffloadBackend::OffloadBackend(device::Device& device, std::unique_ptr<ResidencyPolicy> policy,
                               OffloadOptions options)
    : device_(device),
      policy_(std::move(policy)),
      options_(std::move(options)),
      mover_(device),
      ledger_(false) {
  OMNI_INTERNAL_ASSERT(policy_ != nullptr);
  // Layerwise blocks move at their own hooks: it always streams.
  if (policy_->kind() == PolicyKind::layerwise) options_.streaming = true;
}

OffloadBackend::~OffloadBackend() {
  disable();
  finish_copies();  // a failed enable() may have left some queued
}

void OffloadBackend::finish_copies() noexcept {
  // Queued copies read the homes, which die with this backend: a request
  // cancelled between a block's upload and its fence, or a prefetch for a
  // request that never came, leaves some in flight that no fence is kept for.
  try {
    device_.synchronize();
  } catch (...) {
  }
  mover_.drain();
}

OffloadBackend::Component& OffloadBackend::component(std::string_view name) {
  for (auto& c : components_)
    if (c.resolved.path == name) return c;
  std::string known;
  for (auto& c : components_) known += (known.empty() ? "" : ", ") + c.resolved.path;
  throw ConfigError(detail::concat("unknown component '", name, "'; known: ", known));
}

// ---- the policy ------------------------------------------------------------

bool OffloadBackend::streams_blocks(const Component& c) const {
  return !c.blocks.empty() && c.home != nullptr;
}

std::uint64_t OffloadBackend::window_bytes() const {
  if (policy_->kind() != PolicyKind::layerwise) return 0;
  return (options_.prefetch_blocks + 1) * largest_block_bytes_;
}

std::optional<std::size_t> OffloadBackend::component_at(std::size_t position) const {
  if (position >= schedule_.size()) return std::nullopt;
  for (std::size_t i = 0; i < components_.size(); ++i)
    if (components_[i].resolved.path == schedule_.name(position)) return i;
  return std::nullopt;
}

PolicyState OffloadBackend::policy_state(std::size_t position) const {
  PolicyState state;
  for (const auto& c : components_) {
    const auto& e = ledger_.entries()[c.ledger_index];
    state.components.push_back({e.name, e.role, e.bytes, e.resident_bytes, e.swappable});
    auto& entry = state.components.back();
    // A component without weights is resident as a flag (Residency).
    if (!e.has_weights && e.where == Residency::device) entry.resident_bytes = 1;
    if (streams_blocks(c)) {  // its non-block tensors, fixed; the window is set aside below
      for (auto k : c.blocks) entry.bytes -= c.home->payload_bytes(c.order[k]);
      entry.resident_bytes = entry.bytes;
      entry.swappable = false;
    }
  }
  if (position < schedule_.size())
    for (auto k = position + 1; k < schedule_.size(); ++k)
      if (const auto i = component_at(k)) state.upcoming.push_back(*i);
  state.budget_bytes = budget_bytes_ > 0 ? budget_bytes_ - window_bytes() : std::uint64_t(-1);
  return state;
}

std::vector<std::size_t> OffloadBackend::evictions(std::size_t index, std::size_t position) const {
  const auto& c = components_[index];
  if (!ledger_.entries()[c.ledger_index].swappable || streams_blocks(c)) return {};
  return policy_->evictions(policy_state(position), index, running_);
}

std::uint64_t OffloadBackend::work_out_budget() const {
  return device_budget(device_, options_);
}

// ---- moving groups -------------------------------------------------------

// Ledger bytes are the weights' (the home's alignment padding is not).
// `account`: move the ledger group by group (streaming shows `partial`);
// whole-component moves account once, after all their groups.
void OffloadBackend::upload_group(Component& c, std::size_t g, bool account) {
  auto& slot = c.groups[g];
  if (slot.resident()) return;
  const auto payload = static_cast<std::int64_t>(c.home->payload_bytes(g));
  if (account) ledger_.check_move(c.ledger_index, payload);  // before a byte moves
  auto uploaded = mover_.upload(*c.home, g);
  if (!c.transfer) c.transfer = recorder_.open_transfer(index_of(c), uploads_for_next_request_);
  recorder_.add_copy(*c.transfer, uploaded.bytes, uploaded.pinned, std::move(uploaded.timer));
  slot = std::move(uploaded);
  if (account) ledger_.move_bytes(c.ledger_index, payload);
}

void OffloadBackend::release_group(Component& c, std::size_t g, bool teardown, bool account) {
  auto& slot = c.groups[g];
  if (!slot.resident()) return;
  if (account)
    ledger_.move_bytes(c.ledger_index, -static_cast<std::int64_t>(c.home->payload_bytes(g)),
                       teardown);
  mover_.release(*c.home, g, slot, teardown);
  if (account && ledger_.where(c.ledger_index) == Residency::host) went_home(c);
}

void OffloadBackend::went_home(Component& c) {
  recorder_.count_offload(index_of(c));
  c.transfer.reset();
}

std::vector<std::size_t> OffloadBackend::upload_groups(Component& c,
                                                       const std::vector<std::size_t>& groups,
                                                       bool account) {
  std::vector<std::size_t> uploaded;
  try {
    for (auto g : groups) {
      if (c.groups[g].resident()) continue;
      upload_group(c, g, account);
      uploaded.push_back(g);
    }
  } catch (...) {
    // All-or-nothing: what this call uploaded leaves again.
    for (auto g : uploaded) release_group(c, g, false, account);
    throw;
  }
  return uploaded;
}

void OffloadBackend::wait_group(Component& c, std::size_t g) {
  recorder_.add_wait(index_of(c), mover_.wait(c.groups[g]));
}

void OffloadBackend::upload(Component& c) {
  if (c.bytes == 0 || !c.home) {  // rule 6: nothing to move
    ledger_.transition(c.ledger_index, Residency::device);
    return;
  }
  const auto& entry = ledger_.entries()[c.ledger_index];
  const auto missing = static_cast<std::int64_t>(entry.bytes - entry.resident_bytes);
  if (missing > 0) {
    ledger_.check_move(c.ledger_index, missing);  // before a byte moves
    upload_groups(c, c.order, /*account=*/false);
    ledger_.move_bytes(c.ledger_index, missing);
  }
  for (auto g : c.order) wait_group(c, g);
}

void OffloadBackend::offload(Component& c, bool teardown) {
  if (ledger_.where(c.ledger_index) == Residency::host) return;
  if (!c.home || c.bytes == 0) {
    ledger_.transition(c.ledger_index, Residency::host, teardown);
    went_home(c);
    return;
  }
  const auto resident = static_cast<std::int64_t>(ledger_.entries()[c.ledger_index].resident_bytes);
  for (auto g : c.order) release_group(c, g, teardown, /*account=*/false);
  ledger_.move_bytes(c.ledger_index, -resident, teardown);
  went_home(c);
}

// ---- phases ----------------------------------------------------------------

void OffloadBackend::make_resident(std::size_t index, bool wait_all,
                                   const std::vector<std::size_t>& evict) {
  auto& target = components_[index];
  for (auto i : evict) offload(components_[i]);
  const auto incoming = ledger_.incoming();
  if (incoming && (*incoming == target.ledger_index || ledger_.where(*incoming) == Residency::host))
    ledger_.set_incoming(std::nullopt);
  if (rolling_ && rolling_->to == index) rolling_.reset();
  if (wait_all || !target.streams || !target.home || target.bytes == 0) {
    upload(target);
    return;
  }
  upload_groups(target, target.order);
  for (std::size_t k = 0; k < target.entry_groups; ++k) wait_group(target, target.order[k]);
}

void OffloadBackend::activate(std::string_view name) {
  const auto index = index_of(component(name));
  enter(index);
  leave(index);
}

void OffloadBackend::enter_context(std::string_view name) {
  enter(index_of(component(name)));
}

void OffloadBackend::leave_context(std::string_view name) noexcept {
  for (std::size_t i = 0; i < components_.size(); ++i)
    if (components_[i].resolved.path == name) leave(i);
}

void OffloadBackend::enter(std::size_t index) {
  auto& c = components_[index];
  // A call the schedule does not have drops it: stream without it.
  (void)schedule_.pass(c.resolved.path);
  const auto evict = evictions(index, schedule_.current());
  // A hooked module called inside another running component must not evict it.
  for (auto r : running_) {
    const auto& outer = components_[r];
    OMNI_CHECK(r == index || std::find(evict.begin(), evict.end(), r) == evict.end(),
               ResidencyViolation, "residency invariant broken: ", to_string(c.resolved.role),
               " component '", c.resolved.path, "' was called inside the running forward of ",
               to_string(outer.resolved.role), " component '", outer.resolved.path,
               "', which it would evict mid-forward");
  }
  const bool stream = options_.streaming && moves();
  if (rolling_ && rolling_->to != index) rolling_.reset();  // the final call ended elsewhere
  if (ledger_.entries()[c.ledger_index].swappable && !streams_blocks(c))
    make_resident(index, /*wait_all=*/!stream, evict);
  running_.push_back(index);
  if (!stream) return;
  try {
    plan_ahead(index);
  } catch (...) {
    // The exit hook never runs for a pre-hook that throws: without this the
    // index would stay running and refuse every later eviction of it (H5).
    leave(index);
    throw;
  }
}

void OffloadBackend::leave(std::size_t index) noexcept {
  for (auto it = running_.rbegin(); it != running_.rend(); ++it)
    if (*it == index) {
      running_.erase(std::next(it).base());
      return;
    }
}

void OffloadBackend::enter_group(std::size_t index, std::size_t g) {
  auto& c = components_[index];
  if (streams_blocks(c)) return slide_window(index, g);
  if (rolling_ && rolling_->from == index) {
    // Groups before this one in the final call are done: roll them out.
    const auto pos = std::find(c.order.begin(), c.order.end(), g) - c.order.begin();
    roll(index, static_cast<std::size_t>(pos));
  }
  if (!c.groups[g].resident()) {
    // Called outside its component's phase, or released early: bring it back.
    if (ledger_.where(c.ledger_index) == Residency::host)
      make_resident(index, false, evictions(index, schedule_.current()));
    upload_group(c, g);
  }
  wait_group(c, g);
}

// ---- layerwise -------------------------------------------------------------

// Group g, then the next prefetch_blocks blocks in execution order: the rest
// of this call's, then the first of the next call's if it streams too.
std::vector<std::pair<std::size_t, std::size_t>> OffloadBackend::block_window(std::size_t index,
                                                                              std::size_t g) const {
  std::vector<std::pair<std::size_t, std::size_t>> window{{index, g}};
  const auto& c = components_[index];
  std::size_t k = 0;
  while (k < c.blocks.size() && c.order[c.blocks[k]] != g) ++k;
  auto remaining = options_.prefetch_blocks;
  auto take = [&](std::size_t ci, std::size_t from) {
    const auto& d = components_[ci];
    for (auto j = from; j < d.blocks.size() && remaining > 0; ++j) {
      const std::pair<std::size_t, std::size_t> block{ci, d.order[d.blocks[j]]};
      if (std::find(window.begin(), window.end(), block) != window.end()) break;
      window.push_back(block);
      --remaining;
    }
  };
  take(index, k + 1);
  if (remaining > 0)
    if (const auto next = component_at(schedule_.cursor());
        next && streams_blocks(components_[*next]))
      take(*next, 0);
  return window;
}

// At block g's pre-forward hook: blocks outside the window leave (their
// forwards are done: compute that still reads them keeps them, retire()),
// the window's arrive, and compute waits for g alone.
void OffloadBackend::slide_window(std::size_t index, std::size_t g) {
  auto& c = components_[index];
  const bool block =
      std::any_of(c.blocks.begin(), c.blocks.end(), [&](std::size_t k) { return c.order[k] == g; });
  if (block) {
    prefetch_window(block_window(index, g));
  } else {
    upload_group(c, g);  // a non-block group stays; only a rollback could have sent it home
  }
  wait_group(c, g);
}

void OffloadBackend::prefetch_window(
    const std::vector<std::pair<std::size_t, std::size_t>>& window) {
  // Blocks outside the window leave first: never more than K + 1 resident.
  for (std::size_t ci = 0; ci < components_.size(); ++ci) {
    auto& d = components_[ci];
    if (!streams_blocks(d)) continue;
    for (auto k : d.blocks) {
      const std::pair<std::size_t, std::size_t> b{ci, d.order[k]};
      if (std::find(window.begin(), window.end(), b) == window.end()) release_group(d, d.order[k]);
    }
  }
  for (const auto& [ci, gi] : window) upload_group(components_[ci], gi);
}

std::optional<std::size_t> OffloadBackend::next_call_after_current(std::size_t index) const {
  for (std::size_t k = schedule_.cursor(); k < schedule_.size(); ++k) {
    const auto i = component_at(k);
    if (i && (*i == index || ledger_.entries()[components_[*i].ledger_index].swappable)) return k;
  }
  return std::nullopt;
}

std::uint64_t OffloadBackend::missing_bytes(const Component& c) const {
  const auto& e = ledger_.entries()[c.ledger_index];
  return e.bytes - e.resident_bytes;
}

namespace {
// `flag` is `value` until the end of the scope.
class ScopedFlag {
 public:
  ScopedFlag(bool& flag, bool value) : flag_(flag), before_(std::exchange(flag, value)) {}
  ~ScopedFlag() { flag_ = before_; }
  ScopedFlag(const ScopedFlag&) = delete;
  ScopedFlag& operator=(const ScopedFlag&) = delete;

 private:
  bool& flag_;
  bool before_;
};
}  // namespace

std::uint64_t OffloadBackend::prefetch_limit() const {
  if (policy_->kind() != PolicyKind::model_level || options_.prefetch_into_spare_memory)
    return budget_bytes_;
  const auto bound = planned_peak_ + 2 * largest_group_bytes_;
  return budget_bytes_ > 0 ? std::min(bound, budget_bytes_) : bound;
}

void OffloadBackend::plan_ahead(std::size_t index) {
  const auto position = next_call_after_current(index);
  if (!position) return;
  const auto next = *component_at(*position);
  if (next == index) return;
  const bool for_next_request = schedule_.for_next_request(*position);
  const ScopedFlag tagged(uploads_for_next_request_, for_next_request);
  if (streams_blocks(components_[next])) {
    // A running layerwise DiT's window reaches into the next call itself.
    if (streams_blocks(components_[index])) return;
    // Else the next DiT's first blocks become the window (the rest: slide_window).
    auto& n = components_[next];
    if (n.blocks.empty()) return;
    try {
      prefetch_window(block_window(next, n.order[n.blocks.front()]));
    } catch (const DeviceOutOfMemory&) {
      // An offer, not a need: they come at their hooks.
    }
    return;
  }
  auto& n = components_[next];
  auto& running = components_[index];
  // What N's activation would evict anyway leaves now, running components aside.
  const auto evict = evictions(next, *position);
  for (auto i : evict)
    if (std::find(running_.begin(), running_.end(), i) == running_.end()) offload(components_[i]);
  if (ledger_.where(n.ledger_index) == Residency::device) return;
  const bool replaces = std::find(evict.begin(), evict.end(), index) != evict.end();
  const auto limit = prefetch_limit();
  if (limit > 0 && ledger_.resident_bytes() + missing_bytes(n) <= limit) {
    ledger_.set_incoming(n.ledger_index);
    try {
      upload_groups(n, n.order);
    } catch (const DeviceOutOfMemory&) {
      // A prefetch is an offer, not a need: the device said no; N streams in at its entry.
      ledger_.set_incoming(std::nullopt);
    } catch (...) {
      ledger_.set_incoming(std::nullopt);  // nothing of N arrived (all-or-nothing)
      throw;
    }
    return;
  }
  const bool final_call = schedule_.cursor() >= schedule_.size() ||
                          schedule_.name(schedule_.cursor()) != running.resolved.path;
  if (!replaces || !final_call || !running.streams) return;
  ledger_.set_incoming(n.ledger_index);
  rolling_ = Rolling{index, next, 0, for_next_request};
  roll(index, running.entry_groups);  // what fits in the slack goes now
}

void OffloadBackend::roll(std::size_t from, std::size_t position) {
  auto& out = components_[from];
  auto& in = components_[rolling_->to];
  const ScopedFlag tagged(uploads_for_next_request_, rolling_->for_next_request);
  for (std::size_t k = out.entry_groups; k < position; ++k) release_group(out, out.order[k]);
  // Never above the planned peak + 2 groups, nor above what the device allows.
  auto limit = planned_peak_ + 2 * largest_group_bytes_;
  if (budget_bytes_ > 0) limit = std::min(limit, budget_bytes_);
  while (rolling_->next_to < in.order.size()) {
    const auto g = in.order[rolling_->next_to];
    const auto& group = in.home->groups()[g];
    if (ledger_.resident_bytes() + (group.end - group.begin) > limit) break;
    try {
      upload_group(in, g);
    } catch (const DeviceOutOfMemory&) {
      break;  // the rest comes at N's entry
    }
    ++rolling_->next_to;
  }
}

void OffloadBackend::set_schedule(std::vector<std::string> calls) {
  schedule_.set(std::move(calls));
}

void OffloadBackend::append_schedule(const std::vector<std::string>& calls) {
  schedule_.append(calls);
}

// ---- hooks and groups ------------------------------------------------------

void OffloadBackend::install_hook(Component& c) {
  ++hooks_installed_;
  if (const auto n = fault::armed_faults().fail_hook_install_number;
      n && *n == hooks_installed_)  // Note [Fault injection]
    throw InternalError(detail::concat("injected fault: hook installation ", hooks_installed_,
                                       " on '", c.resolved.path, "' failed"));
  const auto index = index_of(c);
  c.hooks.push_back(
      c.resolved.module->register_forward_pre_hook([this, index](nn::Module&) { enter(index); }));
  c.hooks.push_back(
      c.resolved.module->register_forward_exit_hook([this, index](nn::Module&) { leave(index); }));
  if (!options_.streaming || !c.home || !ledger_.entries()[c.ledger_index].swappable) return;
  c.streams = true;
  for (std::size_t k = c.entry_groups; k < c.order.size(); ++k) {
    const auto g = c.order[k];
    auto module = std::dynamic_pointer_cast<nn::Module>(
        find_module(*c.resolved.module, c.home->groups()[g].name));
    c.hooks.push_back(module->register_forward_pre_hook(
        [this, index, g](nn::Module&) { enter_group(index, g); }));
  }
}

// Groups whose module carries hooks wait in their own hook; the rest (the
// component's own tensors, plain torch layers) are uploaded first and waited
// for at entry.
void OffloadBackend::plan_groups(Component& c) {
  c.order.clear();
  std::vector<std::size_t> hooked;
  const auto& groups = c.home->groups();
  c.groups.resize(groups.size());
  for (std::size_t g = 0; g < groups.size(); ++g) {
    largest_group_bytes_ =
        std::max<std::uint64_t>(largest_group_bytes_, groups[g].end - groups[g].begin);
    const bool own_hook =
        options_.streaming && !groups[g].name.empty() &&
        std::dynamic_pointer_cast<nn::Module>(find_module(*c.resolved.module, groups[g].name));
    (own_hook ? hooked : c.order).push_back(g);
  }
  c.entry_groups = c.order.size();
  c.order.insert(c.order.end(), hooked.begin(), hooked.end());
  c.blocks.clear();
  if (!policy_->streams_blocks(c.resolved.role)) return;
  for (std::size_t k = c.entry_groups; k < c.order.size(); ++k)
    if (is_block_group(groups[c.order[k]].name)) c.blocks.push_back(k);
}

namespace {
// Undoes a slot's rebinding: `live` gets a private copy of its home's values
// where it was before. Never throws: out of host memory while undoing, it is
// left on the home itself, which holds the same values and stays valid.
void restore(TensorSlot& slot) noexcept {
  if (!slot.home.defined()) return;
  try {
    rebind(slot.live, slot.origin.is_cpu() ? slot.home.clone() : slot.home.to(slot.origin));
  } catch (...) {
    rebind(slot.live, slot.home);
  }
}
}  // namespace

void OffloadBackend::rollback() noexcept {
  for (auto& c : components_) c.hooks.clear();
  finish_copies();  // no copy may still read a home or write a buffer
  // Every tensor that has a home was rebound to it (or to a device copy of
  // it): give it back a private copy where it was. Tensors without a home
  // were never touched.
  for (auto& c : components_) {
    if (!c.home) continue;
    for (auto& slot : c.home->slots()) restore(slot);
  }
  components_.clear();
  ledger_ = ResidencyLedger(false);
  recorder_.clear();
  schedule_.clear();
  running_.clear();
  rolling_.reset();
  noop_ = false;
}

void OffloadBackend::check_claims(torch::nn::Module& root,
                                  const std::vector<ResolvedComponent>& resolved) {
  std::map<const c10::TensorImpl*, std::string> owner;
  for (const auto& c : resolved)
    for (const auto& e : unique_tensors(*c.module)) {
      const auto [it, fresh] = owner.emplace(e.tensor.unsafeGetTensorImpl(), c.path);
      OMNI_CHECK(fresh, ConfigError, "tensor '", c.path, ".", e.name, "' is shared by components '",
                 it->second, "' and '", c.path,
                 "': it would be homed twice; make one component own it");
    }
  for (const auto& e : unique_tensors(root))
    OMNI_CHECK(owner.count(e.tensor.unsafeGetTensorImpl()), ConfigError, "tensor '", e.name,
               "' belongs to no component: it would stay on the host while the computation runs "
               "on the device; list its module in one of the roles (resident_modules for small "
               "ones)");
}

void OffloadBackend::adopt(const std::vector<ResolvedComponent>& resolved) {
  const std::size_t first = components_.size();
  for (const auto& r : resolved) {
    Component c;
    c.resolved = r;
    c.bytes = tensor_bytes(*r.module);
    const bool swap = policy_->swappable(r.role) && !noop_;
    c.ledger_index = ledger_.add(r.path, r.role, c.bytes, swap);
    recorder_.add_component(ledger_.entries()[c.ledger_index]);
    components_.push_back(std::move(c));
  }
  if (noop_) return;
  // Homes: one host copy per tensor, pinned in chunks. Each tensor is pointed
  // at its offloaded view as soon as its home holds the data, which releases
  // the original: host memory peaks at the weights plus one tensor, not twice
  // the weights. rollback() restores from the homes.
  HostHomeOptions home_options{options_.pin_memory, options_.max_pin_chunk_bytes,
                               options_.mapped_homes};
  auto point_at_home = [this](const std::string& component, TensorSlot& slot) {
    if (options_.home_filled) options_.home_filled(component, slot.name, slot.home);
    rebind(slot.live, device_.offloaded_view(slot.home));
  };
  std::uint64_t done = 0, total = 0;
  for (std::size_t i = first; i < components_.size(); ++i) total += components_[i].bytes;
  const auto& progress = options_.home_progress;
  for (std::size_t i = first; i < components_.size(); ++i) {
    auto& c = components_[i];
    std::vector<TensorSlot> rebound;  // of this component, until its home is complete
    try {
      c.home = HostHome::build(c.resolved.path, *c.resolved.module, device_, home_options,
                               &pin_refused_, [&](TensorSlot& slot) {
                                 point_at_home(c.resolved.path, slot);
                                 rebound.push_back(slot);
                                 done += slot.bytes;
                                 if (progress) progress(done, total);
                               });
    } catch (...) {
      for (auto& slot : rebound) restore(slot);
      throw;
    }
    plan_groups(c);
  }
}

void OffloadBackend::drop_static_homes() {
  // Homes of components that never leave the device are not needed; their
  // regions live on until the copies out of them are done.
  for (auto& c : components_)
    if (!ledger_.entries()[c.ledger_index].swappable && c.home) {
      mover_.keep_until_copied(c.home->region_ptr());
      for (auto& slot : c.home->slots()) slot.home = torch::Tensor();
      c.home.reset();
    }
}

void OffloadBackend::register_split_components(const std::vector<NamedModule>& exclusive,
                                               const std::vector<NamedModule>& resident) {
  OMNI_CHECK(registering_, ConfigError,
             "register_split_components may only be called from enable_omni_model_cpu_offload");
  OMNI_CHECK(components_.empty(), ConfigError, "split components are already registered");
  std::vector<ResolvedComponent> resolved;
  auto add = [&](const NamedModule& m, Role role) {
    auto module = std::dynamic_pointer_cast<nn::Module>(m.second);
    OMNI_CHECK(module != nullptr, ConfigError, "split component '", m.first,
               "' is null or not an omni::nn::Module");
    for (const auto& r : resolved) {
      OMNI_CHECK(r.path != m.first, ConfigError, "split component name '", m.first,
                 "' is registered twice");
      OMNI_CHECK(r.module != module, ConfigError, "module '", m.first, "' is registered both as '",
                 r.path, "' and '", m.first, "'");
    }
    resolved.push_back({m.first, role, module});
  };
  for (const auto& m : exclusive) add(m, Role::split);
  for (const auto& m : resident) add(m, Role::resident);
  for (const auto& a : resolved)
    for (const auto& inner : a.module->modules(/*include_self=*/false))
      for (const auto& b : resolved)
        OMNI_CHECK(inner.get() != b.module.get(), ConfigError, "split component '", b.path,
                   "' is nested inside '", a.path, "'");
  std::vector<std::pair<Role, std::uint64_t>> sizes;
  for (const auto& r : resolved) sizes.emplace_back(r.role, tensor_bytes(*r.module));
  plan(resolved, sizes);
  adopt(resolved);
  if (noop_) return;
  for (auto& c : components_)
    if (c.resolved.role == Role::resident) upload(c);
}

void OffloadBackend::enable(torch::nn::Module& root, const ComponentSpec& spec) {
  if (enabled_) {
    OMNI_CHECK(root_ == &root, ConfigError,
               "offload backend is already enabled on another pipeline; disable() it first");
    return;
  }
  if (!device_.supports_offload()) {
    if (!options_.quiet)
      std::cerr << "omni: notice: device " << device_.name()
                << " has no accelerator memory to offload from; offload is a no-op\n";
    noop_ = true;
  }
  budget_bytes_ = work_out_budget();  // before anything of ours is on the device
  // plan() sets a budget's limit.
  ledger_ = ResidencyLedger(policy_->kind() == PolicyKind::model_level);
  components_.clear();
  auto* delegate = moves() ? dynamic_cast<SupportsModelCpuOffload*>(&root) : nullptr;
  if (delegate) {
    // The model owns its lifecycle: it registers its sub-components with us.
    registering_ = true;
    try {
      delegate->enable_omni_model_cpu_offload({this, options_.split_components});
      registering_ = false;
      OMNI_CHECK(!components_.empty() || noop_, ConfigError,
                 "enable_omni_model_cpu_offload registered no split components");
    } catch (...) {
      registering_ = false;
      delegate->disable_omni_model_cpu_offload();
      rollback();
      throw;
    }
    delegate_ = delegate;
  } else {
    // split_components names sub-components of a split model; silently
    // ignoring it would run a mode the user did not ask for.
    if (!options_.split_components.empty()) {
      std::string names;
      for (const auto& name : options_.split_components)
        names += (names.empty() ? "" : ", ") + name;
      throw ConfigError("split_components (" + names +
                        ") applies only to a split model (one that registers its own "
                        "sub-components); this model has none: leave split_components empty");
    }
    // Resolve and plan before anything moves.
    auto resolved = resolve_components(root, spec, /*require_exclusion_groups=*/moves());
    std::vector<std::pair<Role, std::uint64_t>> sizes;
    for (const auto& r : resolved) sizes.emplace_back(r.role, tensor_bytes(*r.module));
    plan(resolved, sizes);
    try {
      if (!noop_) check_claims(root, resolved);  // before anything is homed
      adopt(resolved);
      if (!noop_) install();  // upload what never moves, install hooks
    } catch (...) {
      rollback();
      throw;
    }
  }
  if (!noop_) drop_static_homes();  // committed: homes of never-swapped components go
  root_ = &root;
  enabled_ = true;
  begin_request();
}

void OffloadBackend::disable() noexcept {
  if (!enabled_) return;
  if (delegate_) delegate_->disable_omni_model_cpu_offload();
  delegate_ = nullptr;
  for (auto& c : components_) c.hooks.clear();
  rolling_.reset();
  running_.clear();
  schedule_.clear();
  for (auto& c : components_) {
    if (!c.home) continue;
    try {
      // A partly streamed component is completed, or sent home if the device refuses.
      if (ledger_.where(c.ledger_index) == Residency::partial) {
        try {
          if (streams_blocks(c)) throw std::runtime_error("layerwise: never resident whole");
          upload(c);
        } catch (...) {
          offload(c);
        }
      }
      if (ledger_.where(c.ledger_index) == Residency::host)
        for (auto& slot : c.home->slots()) rebind(slot.live, slot.home);
    } catch (...) {
    }
  }
  // A component left on the device keeps its buffers, now owned through its
  // parameters: they are freed whenever the pipeline lets go of them, maybe
  // while compute that read them is still queued, so mark them now as a
  // swap would (Note [Uploads on the transfer stream]). disable() cannot
  // fail: a device that refuses the mark leaves the buffer as it was.
  for (auto& c : components_)
    for (auto& g : c.groups) {
      try {
        if (g.resident()) device_.retire(g.buffer);
      } catch (...) {
      }
    }
  finish_copies();
  enabled_ = false;
  noop_ = false;
  root_ = nullptr;
}

void OffloadBackend::plan(const std::vector<ResolvedComponent>& resolved,
                          const std::vector<std::pair<Role, std::uint64_t>>& sizes) {
  std::uint64_t total = 0, tensors = 0;
  for (const auto& [role, bytes] : sizes) total += bytes;
  for (const auto& r : resolved) tensors += unique_tensors(*r.module).size();
  planned_peak_without_offload_ = total;
  // Budgets count weight bytes; device buffers align each tensor. A budget
  // worked out from the device's memory leaves room for that padding.
  const bool known = budget_bytes_ > 0;
  if (!options_.device_memory_budget && known)
    budget_bytes_ = std::max<std::uint64_t>(
        1, budget_bytes_ - std::min<std::uint64_t>(budget_bytes_, tensors * kTensorAlignment));
  const auto kind = policy_->kind();
  if (kind == PolicyKind::budget || kind == PolicyKind::layerwise) ledger_.set_limit(budget_bytes_);
  switch (policy_->kind()) {
    case PolicyKind::model_level:
      planned_peak_ = planned_model_level_peak(sizes);
      break;
    case PolicyKind::budget:
    case PolicyKind::layerwise:
      planned_peak_ = budget_bytes_ > 0 ? std::min(total, budget_bytes_) : total;
      break;
    case PolicyKind::all_resident:
      planned_peak_ = total;
      break;
  }
  // Layerwise: a DiT's non-block tensors are fixed; its blocks stream
  // through a window set aside from the budget.
  std::vector<PolicyState::Entry> entries;
  std::uint64_t fixed = 0;
  largest_block_bytes_ = 0;
  for (std::size_t i = 0; i < resolved.size(); ++i) {
    const auto [role, bytes] = sizes[i];
    PolicyState::Entry e{resolved[i].path, role, bytes, 0, policy_->swappable(role)};
    if (policy_->streams_blocks(role)) {
      const auto blocks = measure_component(e.name, role, *resolved[i].module);
      largest_block_bytes_ = std::max(largest_block_bytes_, blocks.largest_block);
      e.bytes -= blocks.block_bytes;
      e.swappable = false;
    }
    if (!e.swappable) fixed += e.bytes;
    entries.push_back(std::move(e));
  }
  if (noop_ || !known) return;
  const auto window = window_bytes();
  if (policy_->kind() == PolicyKind::layerwise) {
    OMNI_CHECK(largest_block_bytes_ > 0, ConfigError,
               "layerwise offload needs DiT blocks (modules named like blocks.N) to stream; "
               "none were found");
    OMNI_CHECK(window + fixed < budget_bytes_, ConfigError, "a device memory budget of ",
               device::format_bytes(budget_bytes_),
               " is too small for layerwise offload: ", options_.prefetch_blocks + 1, " blocks of ",
               device::format_bytes(largest_block_bytes_), " in flight and ",
               device::format_bytes(fixed), " of tensors that never leave need more");
    std::uint64_t largest_whole = 0;
    for (const auto& e : entries)
      if (e.swappable) largest_whole = std::max(largest_whole, e.bytes);
    planned_peak_ = std::min(budget_bytes_, fixed + window + largest_whole);
  }
  policy_->check_plan(entries, budget_bytes_ - std::min(budget_bytes_, window));
}

// Components that never move go up now. The others get hooks: swappable
// ones move at them; with streaming, the VAE's mark its calls in the
// schedule. Split components are moved by their model's offload contexts.
void OffloadBackend::install() {
  for (auto& c : components_)
    if (!ledger_.entries()[c.ledger_index].swappable) upload(c);
  if (!moves()) return;
  for (auto& c : components_) {
    if (!streams_blocks(c)) continue;
    // Everything of a layerwise DiT but its blocks stays on the device.
    for (std::size_t k = 0; k < c.order.size(); ++k)
      if (std::find(c.blocks.begin(), c.blocks.end(), k) == c.blocks.end())
        upload_group(c, c.order[k]);
    for (std::size_t k = 0; k < c.order.size(); ++k)
      if (c.groups[c.order[k]].resident()) wait_group(c, c.order[k]);
  }
  for (auto& c : components_) {
    const auto role = c.resolved.role;
    if (role == Role::resident || role == Role::split) continue;
    if (policy_->swappable(role) || (options_.streaming && role == Role::vae)) install_hook(c);
  }
}

void OffloadBackend::begin_request() {
  // No forward runs between requests: what a failed one left is stale.
  running_.clear();
  // Records are per request; a prefetch for this one keeps its record
  // (Note [Transfers for the next request]).
  const auto moved = recorder_.begin_request();
  for (auto& c : components_) {
    if (c.transfer && *c.transfer < moved.size() &&
        moved[*c.transfer] != OffloadRecorder::kNoTransfer)
      c.transfer = moved[*c.transfer];
    else
      c.transfer.reset();
  }
  ledger_.reset_peak();
  device_.reset_peak();
}

OffloadReport OffloadBackend::build_report(bool per_request) {
  OffloadReport r = recorder_.build(per_request, ledger_);
  r.device = device_.name();
  r.stand_in = device_.is_stand_in();
  r.strategy = noop_ || !enabled_ ? "none" : strategy();
  r.streaming = options_.streaming && moves() && r.strategy != "none";
  r.planned_peak_bytes = planned_peak_;
  r.planned_peak_without_offload_bytes = planned_peak_without_offload_;
  r.device_peak_allocated_bytes = device_.memory_stats().peak_allocated_bytes;
  for (const auto& c : components_) {
    if (c.home) {
      r.pinned_host_bytes += c.home->pinned_bytes();
      r.pageable_host_bytes += c.home->pageable_bytes();
    }
  }
  return r;
}

OffloadReport OffloadBackend::end_request() {
  return build_report(/*per_request=*/true);
}

OffloadReport OffloadBackend::report() {
  return build_report(/*per_request=*/false);
}

}  // namespace omni::offload
