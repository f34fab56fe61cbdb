#include "omni/offload/backend.h"

#include <algorithm>
#include <iostream>
#include <map>

#include "offload/rebind.h"
#include "omni/error.h"

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

OffloadBackend::OffloadBackend(device::Device& device, OffloadOptions options)
    : device_(device), options_(options), mover_(device), ledger_(false) {}

OffloadBackend::~OffloadBackend() {
  disable();
  mover_.drain();
}

OffloadBackend::Component& OffloadBackend::component(std::string_view name) {
  for (auto& c : components_)
    if (c.resolved.path == name) return c;
  std::string known;
  for (auto& c : components_) known += (known.empty() ? "" : ", ") + c.resolved.path;
  throw ConfigError(detail::concat("unknown component '", name, "'; known: ", known));
}

bool OffloadBackend::conflicts(Role target, Role other) const {
  if (!exclusive()) return false;
  return (target == Role::dit && (other == Role::encoder || other == Role::dit)) ||
         (target == Role::encoder && other == Role::dit) ||
         (target == Role::split && other == Role::split);
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
  if (!c.transfer) c.transfer = recorder_.open_transfer(index_of(c));
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

void OffloadBackend::make_resident(std::size_t index, bool wait_all) {
  auto& target = components_[index];
  const auto role = target.resolved.role;
  for (auto& other : components_)
    if (&other != &target && conflicts(role, other.resolved.role)) offload(other);
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
  // A hooked module called inside another running component must not evict it.
  for (auto r : running_) {
    const auto& outer = components_[r];
    OMNI_CHECK(r == index || !conflicts(c.resolved.role, outer.resolved.role), ResidencyViolation,
               "residency invariant broken: ", to_string(c.resolved.role), " component '",
               c.resolved.path, "' was called inside the running forward of ",
               to_string(outer.resolved.role), " component '", outer.resolved.path,
               "', which it would evict mid-forward");
  }
  // Calls the run skipped (a prompt cache hit skips the encoder) are passed
  // over; a call the schedule does not have left it: stream without it.
  const auto from = schedule_.begin() + static_cast<std::ptrdiff_t>(cursor_);
  if (const auto call = std::find(from, schedule_.end(), c.resolved.path);
      call != schedule_.end()) {
    cursor_ = static_cast<std::size_t>(call - schedule_.begin()) + 1;
  } else if (!schedule_.empty()) {
    schedule_.clear();
    cursor_ = 0;
  }
  const bool stream = options_.streaming && exclusive();
  if (rolling_ && rolling_->to != index) rolling_.reset();  // the final call ended elsewhere
  if (ledger_.entries()[c.ledger_index].swappable) make_resident(index, /*wait_all=*/!stream);
  running_.push_back(index);
  if (stream) plan_ahead(index);
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
  if (rolling_ && rolling_->from == index) {
    // Groups before this one in the final call are done: roll them out.
    const auto pos = std::find(c.order.begin(), c.order.end(), g) - c.order.begin();
    roll(index, static_cast<std::size_t>(pos));
  }
  if (!c.groups[g].resident()) {
    // Called outside its component's phase, or released early: bring it back.
    if (ledger_.where(c.ledger_index) == Residency::host) make_resident(index, false);
    upload_group(c, g);
  }
  wait_group(c, g);
}

std::optional<std::size_t> OffloadBackend::next_call_after_current(std::size_t index) const {
  for (std::size_t k = cursor_; k < schedule_.size(); ++k) {
    for (std::size_t i = 0; i < components_.size(); ++i) {
      if (components_[i].resolved.path != schedule_[k]) continue;
      if (i == index) return i;
      if (ledger_.entries()[components_[i].ledger_index].swappable) return i;
    }
  }
  return std::nullopt;
}

std::uint64_t OffloadBackend::missing_bytes(const Component& c) const {
  const auto& e = ledger_.entries()[c.ledger_index];
  return e.bytes - e.resident_bytes;
}

std::uint64_t OffloadBackend::prefetch_budget() const {
  const auto capacity = device_.memory_stats().capacity_bytes;
  if (capacity == 0) return 0;
  std::uint64_t reserve = 0;
  if (options_.reserve_bytes)
    reserve = *options_.reserve_bytes;
  else if (!device_.is_stand_in())
    reserve = std::max<std::uint64_t>(capacity / 5, 4ull << 30);
  return capacity > reserve ? capacity - reserve : 0;
}

void OffloadBackend::plan_ahead(std::size_t index) {
  const auto next = next_call_after_current(index);
  if (!next || *next == index) return;
  auto& n = components_[*next];
  auto& running = components_[index];
  // What N's activation would evict anyway leaves now, the running component aside.
  for (auto& other : components_)
    if (&other != &n && &other != &running && conflicts(n.resolved.role, other.resolved.role))
      offload(other);
  if (ledger_.where(n.ledger_index) == Residency::device) return;
  const bool replaces = conflicts(n.resolved.role, running.resolved.role);
  const auto budget = prefetch_budget();
  if (ledger_.resident_bytes() + missing_bytes(n) <= budget) {
    ledger_.set_incoming(n.ledger_index);
    try {
      upload_groups(n, n.order);
    } catch (const DeviceOutOfMemory&) {
      // A prefetch is an offer, not a need: the device said no; N streams in at its entry.
      ledger_.set_incoming(std::nullopt);
    }
    return;
  }
  const bool final_call =
      cursor_ >= schedule_.size() || schedule_[cursor_] != running.resolved.path;
  if (!replaces || !final_call || !running.streams) return;
  ledger_.set_incoming(n.ledger_index);
  rolling_ = Rolling{index, *next, 0};
  roll(index, running.entry_groups);  // what fits in the slack goes now
}

void OffloadBackend::roll(std::size_t from, std::size_t position) {
  auto& out = components_[from];
  auto& in = components_[rolling_->to];
  for (std::size_t k = out.entry_groups; k < position; ++k) release_group(out, out.order[k]);
  // Never above the planned peak + 2 groups, nor above what the device allows.
  auto limit = planned_peak_ + 2 * largest_group_bytes_;
  if (const auto budget = prefetch_budget(); budget > 0) limit = std::min(limit, budget);
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
  schedule_ = std::move(calls);
  cursor_ = 0;
}

void OffloadBackend::append_schedule(const std::vector<std::string>& calls) {
  if (cursor_ > 0) {
    schedule_.erase(schedule_.begin(), schedule_.begin() + static_cast<std::ptrdiff_t>(cursor_));
    cursor_ = 0;
  }
  schedule_.insert(schedule_.end(), calls.begin(), calls.end());
}

// ---- hooks and groups ------------------------------------------------------

void OffloadBackend::install_hook(Component& c) {
  ++hooks_installed_;
  if (options_.fail_hook_install_number && *options_.fail_hook_install_number == hooks_installed_)
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
  mover_.drain();  // no copy may still read a home or write a buffer
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
  cursor_ = 0;
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
    const bool swap = swappable(r.role) && !noop_;
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
  auto point_at_home = [this](TensorSlot& slot) {
    rebind(slot.live, device_.offloaded_view(slot.home));
  };
  for (std::size_t i = first; i < components_.size(); ++i) {
    auto& c = components_[i];
    std::vector<TensorSlot> rebound;  // of this component, until its home is complete
    try {
      c.home = HostHome::build(c.resolved.path, *c.resolved.module, device_, home_options,
                               &pin_refused_, [&](TensorSlot& slot) {
                                 point_at_home(slot);
                                 rebound.push_back(slot);
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
  planned_peak_ = planned_model_level_peak(sizes);
  planned_peak_without_offload_ = 0;
  for (const auto& [role, bytes] : sizes) planned_peak_without_offload_ += bytes;
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
  ledger_ = ResidencyLedger(exclusive());
  components_.clear();
  auto* delegate = exclusive() ? dynamic_cast<SupportsModelCpuOffload*>(&root) : nullptr;
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
    // Resolve and plan before anything moves.
    auto resolved = resolve_components(root, spec, /*require_exclusion_groups=*/exclusive());
    std::vector<std::pair<Role, std::uint64_t>> sizes;
    std::uint64_t total = 0;
    for (const auto& r : resolved) {
      sizes.emplace_back(r.role, tensor_bytes(*r.module));
      total += sizes.back().second;
    }
    planned_peak_without_offload_ = total;
    planned_peak_ = exclusive() ? planned_model_level_peak(sizes) : total;
    try {
      if (!noop_) check_claims(root, resolved);  // before anything is homed
      adopt(resolved);
      if (!noop_) {
        install(components_);  // upload statics, install hooks
      }
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
  cursor_ = 0;
  for (auto& c : components_) {
    if (!c.home) continue;
    try {
      // A partly streamed component is completed, or sent home if the device refuses.
      if (ledger_.where(c.ledger_index) == Residency::partial) {
        try {
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
  mover_.drain();
  enabled_ = false;
  noop_ = false;
  root_ = nullptr;
}

void ModelLevelOffloadBackend::install(std::vector<Component>& components) {
  for (auto& c : components)
    if (c.resolved.role == Role::vae || c.resolved.role == Role::resident) upload(c);
  for (auto& c : components)
    if (c.resolved.role == Role::dit || c.resolved.role == Role::encoder ||
        (options_.streaming && c.resolved.role == Role::vae))
      install_hook(c);
}

void AllResidentBackend::install(std::vector<Component>& components) {
  for (auto& c : components) upload(c);
}

void OffloadBackend::begin_request() {
  recorder_.begin_request();
  for (auto& c : components_) c.transfer.reset();  // records are per request
  ledger_.reset_peak();
  device_.reset_peak();
}

OffloadReport OffloadBackend::build_report(bool per_request) {
  OffloadReport r = recorder_.build(per_request, ledger_);
  r.device = device_.name();
  r.stand_in = device_.is_stand_in();
  r.strategy = noop_ || !enabled_ ? "none" : strategy();
  r.streaming = options_.streaming && exclusive() && r.strategy != "none";
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
