// Offload backends: who decides where each component's weights live.
//
//   omni::offload::ModelLevelOffloadBackend backend(device, options);
//   backend.enable(pipeline, pipeline.components());  // all-or-nothing
//   backend.begin_request();
//   pipeline.run(...);                                 // hooks move weights at phase boundaries
//   auto report = backend.end_request();
//   backend.disable();                                 // idempotent
//
// OffloadBackend carries out a ResidencyPolicy (Note [Residency policies],
// policy.h): the policy decides what leaves, the Mover moves block groups,
// the OffloadRecorder accounts, the ResidencyLedger stores where everything
// is and checks the policy's invariant.
//
// ModelLevelOffloadBackend (the seed's --enable-cpu-offload): before an
// encoder runs every DiT leaves the device; before a DiT runs every encoder
// and every other DiT leaves; VAE and resident modules are uploaded once at
// enable and never swapped. Offloading copies nothing back: each swappable
// tensor has one host home and the parameter is pointed back at it.
//
// BudgetOffloadBackend (--device-memory-budget): components stay while they
// fit the budget; what must leave is chosen over the known schedule.
//
// AllResidentBackend (offload off on a real or sim device): every component
// is uploaded once at enable and stays.
//
// Note [Streaming model-level offload]
// With OffloadOptions::streaming (the default of --enable-cpu-offload), the
// policy's rules and peak stay, and the swaps are hidden behind compute:
// - Phase entry streams: a component's groups are enqueued in execution
//   order, and each block's pre-forward hook waits only for its own block,
//   so the first forward starts when its first block has landed. Groups
//   whose modules carry no hooks (plain torch layers) are enqueued first and
//   waited for at the component's entry.
// - The pipeline hands the backend its calls (set_schedule). At a
//   component's last call before the next swappable component N:
//   components N's activation would evict anyway leave now; N is prefetched
//   whole if the prefetch limit holds it beside what stays; else, if N must
//   replace the running component, the two roll: each of the running
//   component's hooked groups leaves after its last use and N's groups
//   arrive into the space, never above the planned peak + 2 × the largest
//   group, nor the budget.
// - The prefetch limit: Note [The seed's bound by default].
// - In flight, N is the ledger's `incoming` component (Note [Components in
//   flight]); it becomes the running one at its first call.
//
// Note [The seed's bound by default]
// A user who turns on --enable-cpu-offload asks for the memory bound of the
// seed, whatever the device's free memory: peak resident weights ≤ the
// model-level minimum (the planned peak) + 2 × the largest block group (the
// rolling swap's margin); --offload-streaming off gives the minimum itself.
// So model-level streaming prefetches a whole component beside the running
// one only within that bound (the next request's encoder during the decode,
// typically). Spare device memory beyond it is used only when asked for:
// the budget policy (--device-memory-budget), or
// OffloadOptions::prefetch_into_spare_memory, which --offload auto sets when
// it picks model-level; then the limit is the budget (the device's memory
// minus the reserve by default).
//
// Threading: a backend, its pipeline and its device are driven by one thread
// at a time (the engine's worker). Hooks run on the thread calling forward.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "omni/device/device.h"
#include "omni/offload/call_schedule.h"
#include "omni/offload/components.h"
#include "omni/offload/host_home.h"
#include "omni/offload/ledger.h"
#include "omni/offload/mover.h"
#include "omni/offload/policy.h"
#include "omni/offload/recorder.h"
#include "omni/offload/report.h"
#include "omni/offload/split_model.h"

namespace omni::offload {

struct OffloadOptions {
  bool pin_memory = true;
  std::size_t max_pin_chunk_bytes = 256ull << 20;
  // Print one notice when offload is a no-op (cpu device).
  bool quiet = false;
  // Explicit sub-component selection handed to split models
  // (SupportsModelCpuOffload); empty means all.
  std::vector<std::string> split_components;
  // Note [Streaming model-level offload]. Off: whole-component swaps, the
  // seed's strict behaviour (--offload-streaming off).
  bool streaming = true;
  // Model-level streaming may prefetch a whole component into the spare
  // device memory the budget allows, beyond the seed's bound (Note [The
  // seed's bound by default]). Off by default; --offload auto turns it on
  // when it picks model-level.
  bool prefetch_into_spare_memory = false;
  // Device bytes kept free of weights (activations, other programs) when
  // the default budget is worked out (--reserve-memory). nullopt: 0 on sim
  // (its capacity counts weights only), on cuda a fifth of the card and at
  // least 4 GiB.
  std::optional<std::uint64_t> reserve_bytes;
  // Device bytes weights may hold (--device-memory-budget). nullopt: the
  // device's memory when enabled (sim: its capacity; cuda: free memory plus
  // what omni holds) minus the reserve. The model-level policy uses it to
  // decide prefetches; the budget policy keeps everything within it.
  std::optional<std::uint64_t> device_memory_budget;
  // Layerwise offload: how many blocks upload ahead of the one computing
  // (--prefetch-blocks).
  std::size_t prefetch_blocks = 1;
  // Components whose homes stay in the mapped checkpoint under a host
  // memory budget, and their staging ring (Note [Mapped homes]).
  MappedHomes mapped_homes;
  // Called as enable() fills the host homes (the bytes read from the
  // checkpoint, the long part of loading a large model): bytes done so far
  // and the bytes of every home, on enable()'s thread, after each tensor;
  // the last call has done == total. Must not throw.
  std::function<void(std::uint64_t done, std::uint64_t total)> home_progress;
  // Called on enable()'s thread with each tensor of a component (its name in
  // the component, its home) as soon as its home holds it, before anything
  // uploads from it: may change the home's values in place, never its shape
  // or dtype (fusing a LoRA into the home: Note [Fusing a LoRA]).
  std::function<void(const std::string& component, const std::string& tensor, torch::Tensor& home)>
      home_filled;
};

class OffloadBackend : public SplitOffloadHost {
 public:
  OffloadBackend(device::Device& device, std::unique_ptr<ResidencyPolicy> policy,
                 OffloadOptions options = {});
  virtual ~OffloadBackend();
  OffloadBackend(const OffloadBackend&) = delete;
  OffloadBackend& operator=(const OffloadBackend&) = delete;

  // Resolves the components, plans, builds homes and installs what the
  // strategy needs. All-or-nothing: on failure every hook is removed and
  // every tensor is back where it was, then the error propagates. Calling it
  // again on the same root is a no-op; on another root it is a ConfigError.
  // ConfigError too for a tensor of the root that no component claims (it
  // would stay on the host) or that two components share (homed twice).
  void enable(torch::nn::Module& root, const ComponentSpec& spec);

  // Removes every hook. Components that are on the device stay there
  // (partly streamed ones are completed first); offloaded ones are left
  // pointing at their host homes (ordinary host tensors, valid for as long
  // as the parameters reference them). The VAE and resident modules stay on
  // the device. Waits for copies in flight. Idempotent; never throws.
  void disable() noexcept;

  bool enabled() const { return enabled_; }
  // The policy's name: "model-level", "budget", "all-resident".
  std::string strategy() const { return std::string(to_string(policy_->kind())); }
  const ResidencyPolicy& policy() const { return *policy_; }

  // The component calls the running request will make, in order (component
  // names, VAE included, one per forward), and those of requests queued
  // behind it: streaming reads ahead in it (Note [Streaming model-level
  // offload]). A call that does not match it drops the rest, which is always
  // safe. Host thread, between or during requests.
  void set_schedule(std::vector<std::string> calls);
  void append_schedule(const std::vector<std::string>& calls);

  // Per-request accounting: begin_request() resets the per-request counters;
  // end_request() returns the report of everything since (waiting for the
  // transfer timings).
  void begin_request();
  OffloadReport end_request();
  // Totals since enable(); `transfers` lists the latest request's only.
  OffloadReport report();

  const ResidencyLedger& ledger() const { return ledger_; }
  device::Device& device() { return device_; }
  // The plan: max(encoders, largest DiT) + statics under the model-level
  // policy, at most the budget under the budget policy; the largest block group.
  std::uint64_t planned_peak_bytes() const { return planned_peak_; }
  // The device bytes weights may hold (OffloadOptions::device_memory_budget),
  // worked out at enable(); 0 when the device does not say.
  std::uint64_t budget_bytes() const { return budget_bytes_; }
  std::uint64_t largest_group_bytes() const { return largest_group_bytes_; }

  // Makes component `name` resident, applying the strategy's exclusion
  // first (what the pre-forward hooks and offload contexts call). A
  // ResidencyViolation, naming both, when it would evict a component whose
  // forward is still running (a hooked module called inside another).
  void activate(std::string_view name) override;
  // OffloadContext's scope: activate, and mark `name` running until it ends.
  void enter_context(std::string_view name) override;
  void leave_context(std::string_view name) noexcept override;

  // SplitOffloadHost: see split_model.h. Only during enable() of a
  // pipeline that implements SupportsModelCpuOffload.
  void register_split_components(const std::vector<NamedModule>& exclusive,
                                 const std::vector<NamedModule>& resident) override;

 protected:
  struct Component {
    ResolvedComponent resolved;
    std::size_t ledger_index = 0;
    std::uint64_t bytes = 0;
    std::unique_ptr<HostHome> home;     // swappable components only (after enable)
    std::vector<ResidentGroup> groups;  // one per home group
    // Upload order: the groups waited for at entry (no module of their own
    // to hook), then the hooked ones in execution order.
    std::vector<std::size_t> order;
    std::size_t entry_groups = 0;  // the first entry_groups of `order`
    bool streams = false;          // its groups' hooks are installed
    // Layerwise: the positions in `order` of the groups that stream through
    // every call (blocks.N); the other groups stay on the device.
    std::vector<std::size_t> blocks;
    std::vector<nn::HookHandle> hooks;
    std::optional<std::size_t> transfer;  // the recorder's record this phase's copies add to
  };

  // Whether the policy ever moves anything (else: everything uploaded at enable).
  bool moves() const { return policy_->kind() != PolicyKind::all_resident; }
  // The part of enable after homes exist: uploads what never moves, hooks the rest.
  void install();

  // Uploads every group of `c` not on the device and waits for all of them.
  void upload(Component& c);
  void offload(Component& c, bool teardown = false);
  Component& component(std::string_view name);
  void install_hook(Component& c);
  std::vector<Component>& components() { return components_; }

  device::Device& device_;
  std::unique_ptr<ResidencyPolicy> policy_;
  OffloadOptions options_;

 private:
  std::size_t index_of(const Component& c) const { return &c - components_.data(); }
  // Adds components: homes built, tensors pointed at placeholders (the
  // originals remembered for rollback). Nothing uploaded, no hooks.
  void adopt(const std::vector<ResolvedComponent>& resolved);
  static void check_claims(torch::nn::Module& root, const std::vector<ResolvedComponent>& resolved);
  void plan_groups(Component& c);
  void drop_static_homes();
  void rollback() noexcept;
  // Waits for every queued copy (they read the homes) and drops the kept buffers.
  void finish_copies() noexcept;
  OffloadReport build_report(bool per_request);

  std::uint64_t work_out_budget() const;
  // The planned peak, and the policy's checks of the sizes against the budget.
  void plan(const std::vector<ResolvedComponent>& resolved,
            const std::vector<std::pair<Role, std::uint64_t>>& sizes);
  // What the policy sees when deciding for the call at schedule position
  // `position` (the calls after it are upcoming).
  PolicyState policy_state(std::size_t position) const;
  // The components the policy sends away before component `index` runs at
  // schedule position `position`, keeping the running ones if it can.
  std::vector<std::size_t> evictions(std::size_t index, std::size_t position) const;

  // Streaming (Note [Streaming model-level offload]).
  void enter(std::size_t index);
  void leave(std::size_t index) noexcept;
  void enter_group(std::size_t index, std::size_t group);
  // Layerwise (Note [Residency policies]): whether `c` streams its blocks
  // through every call; the window of blocks that must be resident when
  // group `g` of component `index` computes; moving to it.
  bool streams_blocks(const Component& c) const;
  std::vector<std::pair<std::size_t, std::size_t>> block_window(std::size_t index,
                                                                std::size_t g) const;
  void slide_window(std::size_t index, std::size_t g);
  void prefetch_window(const std::vector<std::pair<std::size_t, std::size_t>>& window);
  // The device bytes set aside for layerwise windows: (K + 1) × the largest
  // streamed block.
  std::uint64_t window_bytes() const;
  void make_resident(std::size_t index, bool wait_all, const std::vector<std::size_t>& evict);
  void upload_group(Component& c, std::size_t group, bool account = true);
  void release_group(Component& c, std::size_t group, bool teardown = false, bool account = true);
  // Uploads those of `groups` not on the device; all-or-nothing. Returns them.
  std::vector<std::size_t> upload_groups(Component& c, const std::vector<std::size_t>& groups,
                                         bool account = true);
  void went_home(Component& c);
  void wait_group(Component& c, std::size_t group);
  void plan_ahead(std::size_t index);
  void roll(std::size_t from, std::size_t position);
  // The schedule position of the next call, after the running component's,
  // of another swappable component (or of `index` itself, if first).
  std::optional<std::size_t> next_call_after_current(std::size_t index) const;
  std::optional<std::size_t> component_at(std::size_t position) const;
  std::uint64_t missing_bytes(const Component& c) const;
  // Note [The seed's bound by default]; 0: none known.
  std::uint64_t prefetch_limit() const;

  Mover mover_;
  OffloadRecorder recorder_;
  SupportsModelCpuOffload* delegate_ = nullptr;
  bool registering_ = false;
  bool enabled_ = false;
  bool noop_ = false;
  torch::nn::Module* root_ = nullptr;
  ResidencyLedger ledger_;
  std::vector<Component> components_;
  std::uint64_t planned_peak_ = 0;
  std::uint64_t planned_peak_without_offload_ = 0;
  std::uint64_t largest_group_bytes_ = 0;
  std::uint64_t budget_bytes_ = 0;
  std::uint64_t largest_block_bytes_ = 0;  // of the groups that stream (layerwise)
  bool pin_refused_ = false;
  int hooks_installed_ = 0;

  CallSchedule schedule_;
  // Uploads now are for a queued request (Note [Transfers for the next request]).
  bool uploads_for_next_request_ = false;
  std::vector<std::size_t> running_;  // components whose forward is running, innermost last
  // A rolling swap in progress: `from`'s groups leave after their last use
  // in its final call and `to`'s arrive into the space (Note [Streaming…]).
  struct Rolling {
    std::size_t from, to;
    std::size_t next_to = 0;        // position in to's upload order of the next group to upload
    bool for_next_request = false;  // `to`'s call is a queued request's
  };
  std::optional<Rolling> rolling_;
};

class ModelLevelOffloadBackend final : public OffloadBackend {
 public:
  explicit ModelLevelOffloadBackend(device::Device& device, OffloadOptions options = {})
      : OffloadBackend(device, make_policy(PolicyKind::model_level), std::move(options)) {}
};

class BudgetOffloadBackend final : public OffloadBackend {
 public:
  explicit BudgetOffloadBackend(device::Device& device, OffloadOptions options = {})
      : OffloadBackend(device, make_policy(PolicyKind::budget), std::move(options)) {}
};

class LayerwiseOffloadBackend final : public OffloadBackend {
 public:
  explicit LayerwiseOffloadBackend(device::Device& device, OffloadOptions options = {})
      : OffloadBackend(device, make_policy(PolicyKind::layerwise), std::move(options)) {}
};

class AllResidentBackend final : public OffloadBackend {
 public:
  explicit AllResidentBackend(device::Device& device, OffloadOptions options = {})
      : OffloadBackend(device, make_policy(PolicyKind::all_resident), std::move(options)) {}
};

// The peak resident weight bytes model-level offload plans for:
// max(sum of encoders, largest DiT) + VAEs + resident modules.
std::uint64_t planned_model_level_peak(const std::vector<std::pair<Role, std::uint64_t>>& sizes);

}  // namespace omni::offload
