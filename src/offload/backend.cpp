#include "omni/offload/backend.h"

#include <algorithm>
#include <iostream>

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
    : device_(device), options_(options), ledger_(false) {}

OffloadBackend::~OffloadBackend() {
  disable();
}

OffloadBackend::Component& OffloadBackend::component(std::string_view name) {
  for (auto& c : components_)
    if (c.resolved.path == name) return c;
  std::string known;
  for (auto& c : components_) known += (known.empty() ? "" : ", ") + c.resolved.path;
  throw ConfigError(detail::concat("unknown component '", name, "'; known: ", known));
}

namespace {
// A device tensor aliasing buffer[offset, offset + bytes) with home's shape.
torch::Tensor device_view(const torch::Tensor& buffer, std::size_t offset,
                          const torch::Tensor& home) {
  const auto element = static_cast<std::size_t>(home.element_size());
  OMNI_INTERNAL_ASSERT(offset % element == 0, "misaligned slot");
  auto view =
      torch::empty({0}, torch::TensorOptions().dtype(home.scalar_type()).device(buffer.device()));
  view.set_(buffer.storage(), static_cast<std::int64_t>(offset / element), home.sizes(),
            home.strides());
  return view;
}
}  // namespace

void OffloadBackend::upload(Component& c) {
  auto& entry = ledger_.entries()[c.ledger_index];
  if (entry.where == Residency::device) return;
  // Check the invariant before a byte moves.
  {
    auto probe = ledger_;
    probe.transition(c.ledger_index, Residency::device);
  }
  if (c.bytes == 0 || !c.home) {  // rule 6: nothing to move
    ledger_.transition(c.ledger_index, Residency::device);
    c.stats.where = Residency::device;
    return;
  }
  auto timer = device_.start_transfer_timer();
  std::vector<torch::Tensor> buffers;
  std::vector<std::size_t> rebound;
  bool all_pinned = true;
  std::uint64_t moved = 0;
  const auto& region = c.home->region();
  try {
    for (const auto& group : c.home->groups()) {
      const std::size_t size = group.end - group.begin;
      if (size == 0) continue;
      auto buffer = device_.allocate(size);
      for (const auto& piece : region.pieces()) {
        const std::size_t lo = std::max(piece.begin, group.begin);
        const std::size_t hi = std::min(piece.end, group.end);
        if (lo >= hi) continue;
        device_.copy_to_device(buffer, lo - group.begin, region.data() + lo, hi - lo, piece.pinned);
        all_pinned = all_pinned && piece.pinned;
        moved += hi - lo;
      }
      for (auto index : group.slots) {
        auto& slot = c.home->slots()[index];
        rebind(slot.live, device_view(buffer, slot.offset - group.begin, slot.home));
        rebound.push_back(index);
      }
      buffers.push_back(std::move(buffer));
    }
    timer->stop();
    device_.publish_uploads();
  } catch (...) {
    for (auto index : rebound) {
      auto& slot = c.home->slots()[index];
      rebind(slot.live, device_.offloaded_view(slot.home));
    }
    for (auto& b : buffers) device_.retire(b);
    throw;
  }
  c.buffers = std::move(buffers);
  ledger_.transition(c.ledger_index, Residency::device);
  c.stats.where = Residency::device;
  c.stats.uploads += 1;
  c.stats.upload_bytes += moved;
  transfers_.push_back({c.resolved.path, Direction::h2d, moved, 0.0, all_pinned});
  pending_.emplace_back(transfers_.size() - 1, std::move(timer));
}

void OffloadBackend::offload(Component& c, bool teardown) {
  if (ledger_.entries()[c.ledger_index].where == Residency::host) return;
  ledger_.transition(c.ledger_index, Residency::host, teardown);
  if (c.home) {
    for (auto& slot : c.home->slots())
      rebind(slot.live, teardown ? slot.home : device_.offloaded_view(slot.home));
  }
  for (auto& b : c.buffers) device_.retire(b);
  c.buffers.clear();  // the device copies die here: zero bytes go back
  c.stats.where = Residency::host;
  c.stats.offloads += 1;
}

void OffloadBackend::activate(std::string_view name) {
  auto& target = component(name);
  const auto role = target.resolved.role;
  if (exclusive()) {
    for (auto& other : components_) {
      if (&other == &target) continue;
      const auto other_role = other.resolved.role;
      const bool evict =
          (role == Role::dit && (other_role == Role::encoder || other_role == Role::dit)) ||
          (role == Role::encoder && other_role == Role::dit) ||
          (role == Role::split && other_role == Role::split);
      if (evict) offload(other);
    }
  }
  upload(target);
}

void OffloadBackend::install_hook(Component& c) {
  ++hooks_installed_;
  if (options_.fail_hook_install_number && *options_.fail_hook_install_number == hooks_installed_)
    throw InternalError(detail::concat("injected fault: hook installation ", hooks_installed_,
                                       " on '", c.resolved.path, "' failed"));
  const std::string name = c.resolved.path;
  c.hooks.push_back(
      c.resolved.module->register_forward_pre_hook([this, name](nn::Module&) { activate(name); }));
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
  // Every tensor that has a home was rebound to it (or to a device copy of
  // it): give it back a private copy where it was. Tensors without a home
  // were never touched.
  for (auto& c : components_) {
    if (!c.home) continue;
    for (auto& slot : c.home->slots()) restore(slot);
  }
  for (auto& c : components_) {
    for (auto& b : c.buffers) device_.retire(b);
    c.buffers.clear();
  }
  components_.clear();
  ledger_ = ResidencyLedger(false);
  transfers_.clear();
  pending_.clear();
  timed_transfers_ = 0;
  earlier_h2d_bytes_ = earlier_d2h_bytes_ = 0;
  noop_ = false;
}

void OffloadBackend::adopt(const std::vector<ResolvedComponent>& resolved) {
  const std::size_t first = components_.size();
  for (const auto& r : resolved) {
    Component c;
    c.resolved = r;
    c.bytes = tensor_bytes(*r.module);
    const bool swap = swappable(r.role) && !noop_;
    c.ledger_index = ledger_.add(r.path, r.role, c.bytes, swap);
    c.stats.name = r.path;
    c.stats.role = r.role;
    c.stats.bytes = c.bytes;
    c.stats.swappable = swap;
    components_.push_back(std::move(c));
  }
  if (noop_) return;
  // Homes: one host copy per tensor, pinned in chunks. Each tensor is pointed
  // at its offloaded view as soon as its home holds the data, which releases
  // the original: host memory peaks at the weights plus one tensor, not twice
  // the weights. rollback() restores from the homes.
  HostHomeOptions home_options{options_.pin_memory, options_.max_pin_chunk_bytes};
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
  }
}

void OffloadBackend::drop_static_homes() {
  // Homes of components that never leave the device are not needed.
  for (auto& c : components_)
    if (!ledger_.entries()[c.ledger_index].swappable && c.home) {
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
  for (auto& c : components_) {
    // A component left on the device keeps its buffers, now owned through its
    // parameters: they are freed whenever the pipeline lets go of them, maybe
    // while compute that read them is still queued, so mark them now as a
    // swap would (Note [Uploads on the transfer stream]). disable() cannot
    // fail: a device that refuses the mark leaves the buffer as it was.
    for (auto& b : c.buffers) {
      try {
        device_.retire(b);
      } catch (...) {
      }
    }
    if (!c.home) continue;
    if (ledger_.entries()[c.ledger_index].where == Residency::host)
      for (auto& slot : c.home->slots()) rebind(slot.live, slot.home);
  }
  enabled_ = false;
  noop_ = false;
  root_ = nullptr;
}

void ModelLevelOffloadBackend::install(std::vector<Component>& components) {
  for (auto& c : components)
    if (c.resolved.role == Role::vae || c.resolved.role == Role::resident) upload(c);
  for (auto& c : components)
    if (c.resolved.role == Role::dit || c.resolved.role == Role::encoder) install_hook(c);
}

void AllResidentBackend::install(std::vector<Component>& components) {
  for (auto& c : components) upload(c);
}

void OffloadBackend::resolve_timings() {
  for (auto& [index, timer] : pending_) transfers_[index].seconds = timer->seconds();
  pending_.clear();
  for (; timed_transfers_ < transfers_.size(); ++timed_transfers_) {
    const auto& t = transfers_[timed_transfers_];
    if (t.direction != Direction::h2d) continue;
    for (auto& c : components_)
      if (c.resolved.path == t.component) c.stats.upload_seconds += t.seconds;
  }
}

void OffloadBackend::begin_request() {
  resolve_timings();
  // Only the running request's transfers are listed; earlier ones live on
  // in the totals, so a long-running server does not accumulate them.
  for (const auto& t : transfers_)
    (t.direction == Direction::h2d ? earlier_h2d_bytes_ : earlier_d2h_bytes_) += t.bytes;
  transfers_.clear();
  timed_transfers_ = 0;
  request_start_stats_.clear();
  for (const auto& c : components_) request_start_stats_.push_back(c.stats);
  ledger_.reset_peak();
  device_.reset_peak();
}

OffloadReport OffloadBackend::build_report(bool per_request) {
  resolve_timings();
  OffloadReport r;
  r.device = device_.name();
  r.stand_in = device_.is_stand_in();
  r.strategy = noop_ || !enabled_ ? "none" : strategy();
  r.peak_resident_bytes = ledger_.peak_bytes();
  r.planned_peak_bytes = planned_peak_;
  r.planned_peak_without_offload_bytes = planned_peak_without_offload_;
  r.device_peak_allocated_bytes = device_.memory_stats().peak_allocated_bytes;
  for (const auto& c : components_) {
    if (c.home) {
      r.pinned_host_bytes += c.home->pinned_bytes();
      r.pageable_host_bytes += c.home->pageable_bytes();
    }
  }
  if (!per_request) {
    r.h2d_bytes = earlier_h2d_bytes_;
    r.d2h_bytes = earlier_d2h_bytes_;
  }
  for (const auto& t : transfers_) {
    (t.direction == Direction::h2d ? r.h2d_bytes : r.d2h_bytes) += t.bytes;
    r.transfers.push_back(t);
  }
  for (std::size_t i = 0; i < components_.size(); ++i) {
    auto stats = components_[i].stats;
    if (per_request && i < request_start_stats_.size()) {
      const auto& start = request_start_stats_[i];
      stats.uploads -= start.uploads;
      stats.offloads -= start.offloads;
      stats.upload_bytes -= start.upload_bytes;
      stats.upload_seconds -= start.upload_seconds;
    }
    r.components.push_back(stats);
  }
  return r;
}

OffloadReport OffloadBackend::end_request() {
  auto r = build_report(/*per_request=*/true);
  return r;
}

OffloadReport OffloadBackend::report() {
  auto r = build_report(/*per_request=*/false);
  return r;
}

}  // namespace omni::offload
