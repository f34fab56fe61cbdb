// Offload backends: who decides where each component's weights live.
//
//   omni::offload::ModelLevelOffloadBackend backend(device, options);
//   backend.enable(pipeline, pipeline.components());  // all-or-nothing
//   backend.begin_request();
//   pipeline.run(...);                                 // hooks move weights at phase boundaries
//   auto report = backend.end_request();
//   backend.disable();                                 // idempotent
//
// ModelLevelOffloadBackend (the seed's --enable-cpu-offload): before an
// encoder runs every DiT leaves the device; before a DiT runs every encoder
// and every other DiT leaves; VAE and resident modules are uploaded once at
// enable and never swapped. Offloading copies nothing back: each swappable
// tensor has one host home and the parameter is pointed back at it.
//
// AllResidentBackend (offload off on a real or sim device): every component
// is uploaded once at enable and stays.
//
// Threading: a backend, its pipeline and its device are driven by one thread
// at a time (the engine's worker). Hooks run on the thread calling forward.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "omni/device/device.h"
#include "omni/offload/components.h"
#include "omni/offload/host_home.h"
#include "omni/offload/ledger.h"
#include "omni/offload/report.h"
#include "omni/offload/split_model.h"

namespace omni::offload {

struct OffloadOptions {
  bool pin_memory = true;
  std::size_t max_pin_chunk_bytes = 256ull << 20;
  // Test-only: make the N-th hook installation (1-based) throw.
  std::optional<int> fail_hook_install_number;
  // Print one notice when offload is a no-op (cpu device).
  bool quiet = false;
  // Explicit sub-component selection handed to split models
  // (SupportsModelCpuOffload); empty means all.
  std::vector<std::string> split_components;
};

class OffloadBackend : public SplitOffloadHost {
 public:
  explicit OffloadBackend(device::Device& device, OffloadOptions options = {});
  virtual ~OffloadBackend();
  OffloadBackend(const OffloadBackend&) = delete;
  OffloadBackend& operator=(const OffloadBackend&) = delete;

  // Resolves the components, plans, builds homes and installs what the
  // strategy needs. All-or-nothing: on failure every hook is removed and
  // every tensor is back where it was, then the error propagates. Calling it
  // again on the same root is a no-op; on another root it is a ConfigError.
  void enable(torch::nn::Module& root, const ComponentSpec& spec);

  // Removes every hook. Components that are on the device stay there;
  // offloaded ones are left pointing at their host homes (ordinary host
  // tensors, valid for as long as the parameters reference them). The VAE
  // and resident modules stay on the device. Idempotent; never throws.
  void disable() noexcept;

  bool enabled() const { return enabled_; }
  virtual std::string strategy() const = 0;

  // Per-request accounting: begin_request() resets the per-request counters;
  // end_request() returns the report of everything since (waiting for the
  // transfer timings).
  void begin_request();
  OffloadReport end_request();
  // Totals since enable(); `transfers` lists the latest request's only.
  OffloadReport report();

  const ResidencyLedger& ledger() const { return ledger_; }
  device::Device& device() { return device_; }

  // Makes component `name` resident, applying the strategy's exclusion
  // first (what the pre-forward hooks and offload contexts call).
  void activate(std::string_view name) override;

  // SplitOffloadHost: see split_model.h. Only during enable() of a
  // pipeline that implements SupportsModelCpuOffload.
  void register_split_components(const std::vector<NamedModule>& exclusive,
                                 const std::vector<NamedModule>& resident) override;

 protected:
  struct Component {
    ResolvedComponent resolved;
    std::size_t ledger_index = 0;
    std::uint64_t bytes = 0;
    std::unique_ptr<HostHome> home;      // swappable components only
    std::vector<torch::Tensor> buffers;  // device buffers while resident
    std::vector<nn::HookHandle> hooks;
    ComponentReport stats;
  };

  virtual bool exclusive() const = 0;
  virtual bool swappable(Role role) const = 0;
  // Strategy-specific part of enable after homes exist (upload statics, hooks).
  virtual void install(std::vector<Component>& components) = 0;

  void upload(Component& c);
  void offload(Component& c, bool teardown = false);
  Component& component(std::string_view name);
  void install_hook(Component& c);
  std::vector<Component>& components() { return components_; }

  device::Device& device_;
  OffloadOptions options_;

 private:
  // Adds components: homes built, tensors pointed at placeholders (the
  // originals remembered for rollback). Nothing uploaded, no hooks.
  void adopt(const std::vector<ResolvedComponent>& resolved);
  void drop_static_homes();
  void rollback() noexcept;
  OffloadReport build_report(bool per_request);
  void resolve_timings();

  SupportsModelCpuOffload* delegate_ = nullptr;
  bool registering_ = false;
  bool enabled_ = false;
  bool noop_ = false;
  torch::nn::Module* root_ = nullptr;
  ResidencyLedger ledger_;
  std::vector<Component> components_;
  std::uint64_t planned_peak_ = 0;
  std::uint64_t planned_peak_without_offload_ = 0;
  bool pin_refused_ = false;
  int hooks_installed_ = 0;

  // Transfers of the running request (timings resolved lazily, see
  // resolve_timings; the first `timed_transfers_` are counted in the
  // components' upload_seconds) and the bytes of all earlier ones.
  std::vector<Transfer> transfers_;
  std::vector<std::pair<std::size_t, std::unique_ptr<device::TransferTimer>>> pending_;
  std::size_t timed_transfers_ = 0;
  std::uint64_t earlier_h2d_bytes_ = 0;
  std::uint64_t earlier_d2h_bytes_ = 0;
  std::vector<ComponentReport> request_start_stats_;
  std::uint64_t request_peak_ = 0;
};

class ModelLevelOffloadBackend final : public OffloadBackend {
 public:
  using OffloadBackend::OffloadBackend;
  std::string strategy() const override { return "model-level"; }

 protected:
  bool exclusive() const override { return true; }
  bool swappable(Role role) const override {
    return role == Role::dit || role == Role::encoder || role == Role::split;
  }
  void install(std::vector<Component>& components) override;
};

class AllResidentBackend final : public OffloadBackend {
 public:
  using OffloadBackend::OffloadBackend;
  std::string strategy() const override { return "all-resident"; }

 protected:
  bool exclusive() const override { return false; }
  bool swappable(Role) const override { return false; }
  void install(std::vector<Component>& components) override;
};

// The peak resident weight bytes model-level offload plans for:
// max(sum of encoders, largest DiT) + VAEs + resident modules.
std::uint64_t planned_model_level_peak(const std::vector<std::pair<Role, std::uint64_t>>& sizes);

}  // namespace omni::offload
