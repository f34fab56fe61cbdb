#include "bench/offload/strategies.h"

#include <algorithm>
#include <vector>

#include "bench/offload/pinned_host_pool.h"
#include "device/copy_back.h"
#include "offload/rebind.h"
#include "omni/error.h"
#include "omni/offload/backend.h"
#include "omni/offload/host_home.h"

namespace omni::bench {

namespace {

bool is(offload::Role role, offload::Role other) {
  return role == other;
}

// ---------------------------------------------------------------------------
// omni: the real backend.

class OmniStrategy final : public Strategy {
 public:
  OmniStrategy(device::Device& device, OmniMode mode, std::uint64_t device_budget)
      : device_(device), mode_(mode), device_budget_(device_budget) {}
  ~OmniStrategy() override { teardown(); }

  std::string name() const override {
    switch (mode_) {
      case OmniMode::whole_components:
        return "omni";
      case OmniMode::streamed:
        return "omni-streamed";
      case OmniMode::budget:
        return "omni-budget";
      case OmniMode::layerwise:
        return "omni-layerwise";
      case OmniMode::all_resident:
        return "all-resident";
    }
    return "?";
  }
  WeightStorage storage() const override { return WeightStorage::image_views; }
  bool streams() const override { return options().streaming; }

  void enable(ProfilePipeline& pipeline, const WeightProfile& profile) override {
    pipeline_ = &pipeline;
    offload::ComponentSpec spec;
    for (const auto& c : profile.components) {
      if (is(c.role, offload::Role::dit)) spec.dit_modules.push_back(c.name);
      if (is(c.role, offload::Role::encoder)) spec.encoder_modules.push_back(c.name);
      if (is(c.role, offload::Role::vae)) spec.vae_modules.push_back(c.name);
      if (is(c.role, offload::Role::resident)) spec.resident_modules.push_back(c.name);
    }
    auto kind = offload::PolicyKind::model_level;
    if (mode_ == OmniMode::all_resident) kind = offload::PolicyKind::all_resident;
    if (mode_ == OmniMode::budget) kind = offload::PolicyKind::budget;
    if (mode_ == OmniMode::layerwise) kind = offload::PolicyKind::layerwise;
    backend_ =
        std::make_unique<offload::OffloadBackend>(device_, offload::make_policy(kind), options());
    backend_->enable(pipeline, spec);
    note_host();
  }

  void begin_request(const std::vector<std::string>& calls,
                     const std::vector<std::string>& next_calls) override {
    backend_->begin_request();
    backend_->set_schedule(calls);
    backend_->append_schedule(next_calls);
  }

  void enter(std::size_t index) override {
    // The pre-forward hooks are the mover: running them is all a phase
    // boundary does (the VAE has none: it stays resident).
    nn::ForwardScope scope(pipeline_->component(index));
  }
  // Every forward fires the component's hooks (streaming follows the calls).
  void call(std::size_t index) override { enter(index); }

  void end_request() override {
    const auto report = backend_->end_request();
    double seconds = 0;
    for (const auto& t : report.transfers) seconds += t.seconds;
    last_device_seconds_ = seconds;
    last_exposed_seconds_ = report.exposed_transfer_seconds;
    note_host();
    Strategy::end_request();
  }

  std::optional<double> device_timed_transfer_seconds() override { return last_device_seconds_; }
  std::optional<double> exposed_transfer_seconds() override { return last_exposed_seconds_; }

  HostBytes host_bytes() override {
    if (!backend_) return {};
    const auto r = backend_->report();
    return {r.pinned_host_bytes, r.pageable_host_bytes};
  }
  HostBytes host_peak() override { return peak_; }

  void teardown() noexcept override {
    if (backend_) backend_->disable();
    backend_.reset();
    pipeline_ = nullptr;
  }

 private:
  offload::OffloadOptions options() const {
    offload::OffloadOptions options;
    options.pin_memory = true;
    options.quiet = true;
    options.streaming =
        mode_ == OmniMode::streamed || mode_ == OmniMode::budget || mode_ == OmniMode::layerwise;
    const auto capacity = device_.memory_stats().capacity_bytes;
    if (mode_ == OmniMode::budget || mode_ == OmniMode::layerwise)
      options.device_memory_budget = device_budget_;
    else if (device_budget_ > 0 && capacity > device_budget_)
      options.reserve_bytes = capacity - device_budget_;
    return options;
  }

  void note_host() {
    const auto now = host_bytes();
    peak_.pinned = std::max(peak_.pinned, now.pinned);
    peak_.pageable = std::max(peak_.pageable, now.pageable);
  }

  device::Device& device_;
  OmniMode mode_;
  std::uint64_t device_budget_;
  ProfilePipeline* pipeline_ = nullptr;
  std::unique_ptr<offload::OffloadBackend> backend_;
  std::optional<double> last_device_seconds_;
  std::optional<double> last_exposed_seconds_;
  HostBytes peak_;
};

// ---------------------------------------------------------------------------
// The baselines' per-tensor movers (`p.data = p.data.to(...)`).

// One parameter and where its bytes are.
struct Movable {
  torch::Tensor live;  // the module's tensor; rebound in place
  std::size_t bytes = 0;
  bool on_device = false;
  bool host_pinned = false;  // while on the host: is the copy page-locked?
  torch::Tensor buffer;      // the device allocation while on the device
};

struct MovableComponent {
  std::string name;
  offload::Role role = offload::Role::dit;
  std::vector<Movable> tensors;
  bool any_on_device() const {
    return std::any_of(tensors.begin(), tensors.end(),
                       [](const Movable& t) { return t.on_device; });
  }
};

// A tensor with `like`'s dtype, sizes and strides over `storage_owner`'s bytes.
torch::Tensor view_over(const torch::Tensor& storage_owner, const torch::Tensor& like) {
  auto view = torch::empty(
      {0}, torch::TensorOptions().dtype(like.scalar_type()).device(storage_owner.device()));
  view.set_(storage_owner.storage(), 0, like.sizes(), like.strides());
  return view;
}

class Mover {
 public:
  explicit Mover(device::Device& device) : device_(device), pool_(device) {}

  // tensor.to(device[, non_blocking]): a fresh device allocation, a copy from
  // wherever the host bytes are; the host copy is dropped once the copy has
  // finished (pageable memory goes back to the allocator, a pinned block to
  // the pool).
  void to_device(Movable& t, bool blocking) {
    if (t.on_device) return;
    auto buffer = device_.allocate(t.bytes);
    device_.copy_to_device(buffer, 0, t.live.data_ptr(), t.bytes, t.host_pinned);
    if (blocking)
      device_.synchronize();
    else
      in_flight_.push_back(t.live.detach());  // keeps the source alive until flush()
    const bool was_pinned = t.host_pinned;
    offload::rebind(t.live, view_over(buffer, t.live));
    t.buffer = std::move(buffer);
    t.on_device = true;
    t.host_pinned = false;
    if (!was_pinned && blocking) pageable_ -= t.bytes;
    if (!was_pinned && !blocking) pending_pageable_ += t.bytes;
  }

  // Waits for non-blocking uploads and drops their host copies.
  void flush() {
    if (in_flight_.empty()) return;
    device_.synchronize();
    in_flight_.clear();
    pageable_ -= pending_pageable_;
    pending_pageable_ = 0;
  }

  // tensor.to("cpu"): a blocking copy into fresh pageable memory.
  void to_host_pageable(Movable& t) {
    if (!t.on_device) return;
    auto host = torch::empty(t.live.sizes(), torch::TensorOptions().dtype(t.live.scalar_type()));
    device::copy_back(device_).copy_to_host(host.data_ptr(), t.buffer, 0, t.bytes);
    land(t, host, false);
    pageable_ += t.bytes;
    peak_.pageable = std::max(peak_.pageable, pageable_);
  }

  // tensor.to("cpu", non_blocking=True) from a CUDA tensor: torch allocates
  // the destination page-locked, from the caching host allocator.
  void to_host_pinned(Movable& t) {
    if (!t.on_device) return;
    bool pinned = false;
    auto block = pool_.acquire(t.bytes, &pinned);
    device::copy_back(device_).copy_to_host(block.data_ptr(), t.buffer, 0, t.bytes);
    land(t, view_over(block, t.live), pinned);
    peak_.pinned = std::max(peak_.pinned, pool_.pinned_reserved_bytes());
    peak_.pageable = std::max(peak_.pageable,
                              pageable_ + pool_.reserved_bytes() - pool_.pinned_reserved_bytes());
  }

  void note_loaded(std::uint64_t bytes) {
    pageable_ += bytes;
    peak_.pageable = std::max(peak_.pageable, pageable_);
  }

  HostBytes now() const {
    const auto pinned = pool_.pinned_reserved_bytes();
    return {pinned, pageable_ + pool_.reserved_bytes() - pinned};
  }
  HostBytes peak() const { return peak_; }

 private:
  void land(Movable& t, const torch::Tensor& host, bool pinned) {
    offload::rebind(t.live, host);
    device_.retire(t.buffer);
    t.buffer = torch::Tensor();
    t.on_device = false;
    t.host_pinned = pinned;
  }

  device::Device& device_;
  PinnedHostPool pool_;
  std::vector<torch::Tensor> in_flight_;
  std::uint64_t pageable_ = 0;
  std::uint64_t pending_pageable_ = 0;
  HostBytes peak_;
};

std::vector<MovableComponent> collect(ProfilePipeline& pipeline, const WeightProfile& profile) {
  std::vector<MovableComponent> out;
  for (std::size_t i = 0; i < profile.components.size(); ++i) {
    MovableComponent c;
    c.name = profile.components[i].name;
    c.role = profile.components[i].role;
    for (auto& entry : offload::unique_tensors(pipeline.component(i))) {
      Movable m;
      m.live = entry.tensor;
      m.bytes = static_cast<std::size_t>(entry.tensor.numel()) * entry.tensor.element_size();
      m.on_device = !entry.tensor.device().is_cpu();
      c.tensors.push_back(std::move(m));
    }
    out.push_back(std::move(c));
  }
  return out;
}

std::uint64_t component_bytes(const MovableComponent& c) {
  std::uint64_t n = 0;
  for (const auto& t : c.tensors) n += t.bytes;
  return n;
}

// ---------------------------------------------------------------------------
// copy-back: vllm-omni's ModelLevelOffloadBackend + SequentialOffloadHook.

class CopyBackStrategy final : public Strategy {
 public:
  explicit CopyBackStrategy(device::Device& device) : device_(device), mover_(device) {}
  ~CopyBackStrategy() override { teardown(); }

  std::string name() const override { return "copy-back"; }
  WeightStorage storage() const override { return WeightStorage::materialized; }

  void enable(ProfilePipeline& pipeline, const WeightProfile& profile) override {
    components_ = collect(pipeline, profile);
    for (const auto& c : components_) mover_.note_loaded(component_bytes(c));
    // enable(): encoders .to(device); VAEs .to(device, non_blocking=True);
    // residents .to(device). The DiTs stay where the loader put them.
    for (auto& c : components_)
      if (is(c.role, offload::Role::encoder))
        for (auto& t : c.tensors) mover_.to_device(t, /*blocking=*/true);
    for (auto& c : components_)
      if (is(c.role, offload::Role::vae))
        for (auto& t : c.tensors) mover_.to_device(t, /*blocking=*/false);
    mover_.flush();
    for (auto& c : components_)
      if (is(c.role, offload::Role::resident))
        for (auto& t : c.tensors) mover_.to_device(t, /*blocking=*/true);
    // apply_sequential_offload(): each DiT evicts the encoders and the other
    // DiTs; each encoder evicts the DiTs. VAEs and residents get no hook.
    targets_.assign(components_.size(), {});
    hooked_.assign(components_.size(), false);
    for (std::size_t i = 0; i < components_.size(); ++i) {
      const auto role = components_[i].role;
      const bool dit = is(role, offload::Role::dit);
      const bool encoder = is(role, offload::Role::encoder);
      hooked_[i] = dit || encoder;
      for (std::size_t j = 0; j < components_.size(); ++j) {
        if (j == i) continue;
        const auto other = components_[j].role;
        if ((dit && (is(other, offload::Role::encoder) || is(other, offload::Role::dit))) ||
            (encoder && is(other, offload::Role::dit)))
          targets_[i].push_back(j);
      }
    }
  }

  void enter(std::size_t index) override {
    if (!hooked_.at(index)) return;
    // pre_forward: _to_cpu(target) for every target, _to_gpu(module), synchronize().
    for (auto j : targets_[index]) {
      bool moved = false;
      for (auto& t : components_[j].tensors) {
        if (!t.on_device) continue;
        mover_.to_host_pinned(t);
        moved = true;
      }
      if (moved)
        device::copy_back(device_).release_cached_memory();  // current_omni_platform.empty_cache()
    }
    for (auto& t : components_[index].tensors) mover_.to_device(t, /*blocking=*/true);
    device_.synchronize();
  }

  HostBytes host_bytes() override { return mover_.now(); }
  HostBytes host_peak() override { return mover_.peak(); }

  void teardown() noexcept override { components_.clear(); }

 private:
  device::Device& device_;
  Mover mover_;
  std::vector<MovableComponent> components_;
  std::vector<std::vector<std::size_t>> targets_;
  std::vector<bool> hooked_;
};

// ---------------------------------------------------------------------------
// accelerate: diffusers' enable_model_cpu_offload.

class AccelerateStrategy final : public Strategy {
 public:
  explicit AccelerateStrategy(device::Device& device) : device_(device), mover_(device) {}
  ~AccelerateStrategy() override { teardown(); }

  std::string name() const override { return "accelerate"; }
  WeightStorage storage() const override { return WeightStorage::materialized; }

  void enable(ProfilePipeline& pipeline, const WeightProfile& profile) override {
    // self.to("cpu") finds everything on the CPU already; the hooks chain the
    // components in model_cpu_offload_seq order, which is the profile's.
    components_ = collect(pipeline, profile);
    for (const auto& c : components_) mover_.note_loaded(component_bytes(c));
  }

  void enter(std::size_t index) override {
    // CpuOffload.pre_forward: prev_module_hook.offload(); clear_device_cache();
    // module.to(execution_device).
    if (index > 0) {
      for (auto& t : components_[index - 1].tensors) mover_.to_host_pageable(t);
      device::copy_back(device_).release_cached_memory();
    }
    for (auto& t : components_.at(index).tensors) mover_.to_device(t, /*blocking=*/true);
  }

  void end_request() override {
    // maybe_free_model_hooks() → enable_model_cpu_offload(): self.to("cpu"), empty cache.
    for (auto& c : components_)
      for (auto& t : c.tensors) mover_.to_host_pageable(t);
    device::copy_back(device_).release_cached_memory();
    Strategy::end_request();
  }

  HostBytes host_bytes() override { return mover_.now(); }
  HostBytes host_peak() override { return mover_.peak(); }

  void teardown() noexcept override { components_.clear(); }

 private:
  device::Device& device_;
  Mover mover_;
  std::vector<MovableComponent> components_;
};

}  // namespace

std::unique_ptr<Strategy> make_omni_strategy(device::Device& device, OmniMode mode,
                                             std::uint64_t device_budget) {
  return std::make_unique<OmniStrategy>(device, mode, device_budget);
}
std::unique_ptr<Strategy> make_copy_back_strategy(device::Device& device) {
  return std::make_unique<CopyBackStrategy>(device);
}
std::unique_ptr<Strategy> make_accelerate_strategy(device::Device& device) {
  return std::make_unique<AccelerateStrategy>(device);
}

}  // namespace omni::bench
