// Split models (the seed's Cosmos3 case): one module split into named,
// mutually exclusive sub-components that run in different phases.
//
//   class UnifiedTransformerImpl : public omni::nn::Module, public
//   omni::offload::SupportsModelCpuOffload {
//     void enable_omni_model_cpu_offload(const ModelCpuOffloadOptions& o) override {
//       o.host->register_split_components({{"reasoner", reasoner}, {"generator", generator}},
//                                         {{"embed", embed}, {"vae", vae}});
//       host_ = o.host;
//     }
//     void disable_omni_model_cpu_offload() noexcept override { host_ = nullptr; }
//     torch::Tensor forward(...) {
//       { omni::offload::OffloadContext ctx(host_, "reasoner"); ... }   // once
//       for (...) { omni::offload::OffloadContext ctx(host_, "generator"); ... }  // every step
//     }
//   };
//
// Contract (design.md §2, split models): only the running sub-component is
// resident; unknown names are typed errors listing the known ones; entering
// the already-active context moves nothing; enable/disable are idempotent
// and leave no context behind; an explicit component selection is honoured
// or rejected before any partial setup; the sequential path's homes, movers,
// ledger and report are reused.
#pragma once

#include <torch/nn/module.h>

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace omni::offload {

using NamedModule = std::pair<std::string, std::shared_ptr<torch::nn::Module>>;

// What an offload backend offers a split model.
class SplitOffloadHost {
 public:
  virtual ~SplitOffloadHost() = default;
  // Declares the mutually exclusive sub-components (host-resident until
  // activated) and the modules that stay on the device for the model's
  // lifetime (uploaded now, never swapped). Call once, from
  // enable_omni_model_cpu_offload. ConfigError on duplicate names or
  // overlapping modules.
  virtual void register_split_components(const std::vector<NamedModule>& exclusive,
                                         const std::vector<NamedModule>& resident) = 0;
  // Makes `name` the resident sub-component, offloading the active one.
  // Nothing moves when it already is. ConfigError listing the known names.
  virtual void activate(std::string_view name) = 0;
  // OffloadContext's entry and exit: activate(name) and mark it running for
  // the scope, so that a context entered inside it that would evict it is a
  // ResidencyViolation. The exit never throws; the component stays resident.
  virtual void enter_context(std::string_view name) { activate(name); }
  virtual void leave_context(std::string_view name) noexcept {}
};

struct ModelCpuOffloadOptions {
  SplitOffloadHost* host = nullptr;
  // Explicit selection of the sub-components to swap; empty means all. A
  // model must validate it before registering anything: unknown names are a
  // ConfigError; unselected sub-components stay resident.
  std::vector<std::string> components;
};

// Implemented by pipelines/models that own their offload lifecycle; the
// model-level backend delegates to it instead of discovering components.
class SupportsModelCpuOffload {
 public:
  virtual ~SupportsModelCpuOffload() = default;
  virtual void enable_omni_model_cpu_offload(const ModelCpuOffloadOptions& options) = 0;
  // Removes every model-local context; idempotent; never throws.
  virtual void disable_omni_model_cpu_offload() noexcept = 0;
};

// RAII: the sub-component `name` is resident for this scope (and stays so
// until another context activates another one). A null host (offload off)
// makes it a no-op. Not copyable, not movable.
class OffloadContext {
 public:
  OffloadContext(SplitOffloadHost* host, std::string_view name) : host_(host), name_(name) {
    if (host_) host_->enter_context(name_);
  }
  OffloadContext(const OffloadContext&) = delete;
  OffloadContext& operator=(const OffloadContext&) = delete;
  OffloadContext(OffloadContext&&) = delete;
  OffloadContext& operator=(OffloadContext&&) = delete;
  ~OffloadContext() {
    if (host_) host_->leave_context(name_);
  }

 private:
  SplitOffloadHost* host_;
  std::string name_;
};

}  // namespace omni::offload
