// omni::nn::Module: a torch::nn::Module that can carry forward pre-hooks.
//
// Usage:
//   class BlockImpl : public omni::nn::Module { torch::Tensor forward(torch::Tensor x); };
//   OMNI_MODULE(Block);
//   Block block;                     // a holder, like TORCH_MODULE
//   auto handle = block->register_forward_pre_hook([](omni::nn::Module& m) { ... });
//   block(x);                        // runs the hooks, then forward(x)
//   handle.remove();                 // or let it go out of scope
//
// Hooks run on the calling thread, in registration order, before forward.
// An exception from a hook propagates out of the call and forward is not run
// (nor the exit hooks). Exit hooks run when the call ends, even by an exception.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <utility>

namespace omni::nn {

class Module;
using ForwardPreHook = std::function<void(Module&)>;
// Runs when a forward (or ForwardScope) that ran the pre-hooks ends, normally
// or by an exception. Must not throw.
using ForwardExitHook = std::function<void(Module&)>;

namespace detail {
struct HookTable {
  std::map<std::uint64_t, ForwardPreHook> hooks;  // ordered by registration id
  std::map<std::uint64_t, ForwardExitHook> exit_hooks;
  std::uint64_t next_id = 0;
};
}  // namespace detail

// Owns one registered hook; removing it (or destroying the handle) unregisters
// it. Move-only. Safe to destroy after the module is gone.
class HookHandle {
 public:
  HookHandle() = default;
  HookHandle(std::weak_ptr<detail::HookTable> table, std::uint64_t id)
      : table_(std::move(table)), id_(id) {}
  HookHandle(const HookHandle&) = delete;
  HookHandle& operator=(const HookHandle&) = delete;
  HookHandle(HookHandle&& other) noexcept : table_(std::move(other.table_)), id_(other.id_) {
    other.table_.reset();
  }
  HookHandle& operator=(HookHandle&& other) noexcept {
    if (this != &other) {
      remove();
      table_ = std::move(other.table_);
      id_ = other.id_;
      other.table_.reset();
    }
    return *this;
  }
  ~HookHandle() { remove(); }

  // Unregisters the hook; idempotent, never throws.
  void remove() noexcept;
  bool active() const;

 private:
  std::weak_ptr<detail::HookTable> table_;
  std::uint64_t id_ = 0;
};

class Module : public torch::nn::Module {
 public:
  using torch::nn::Module::Module;

  // Registers a hook that runs before every forward call made through a
  // holder (or a ForwardScope). The hook stays until the handle is removed.
  [[nodiscard]] HookHandle register_forward_pre_hook(ForwardPreHook hook);
  // Registers a hook that runs when such a call ends (ForwardExitHook).
  [[nodiscard]] HookHandle register_forward_exit_hook(ForwardExitHook hook);

  std::size_t num_forward_pre_hooks() const { return hooks_->hooks.size(); }

  // Runs the registered hooks in order. Called by ModuleHolder::operator()
  // and ForwardScope; models rarely call it directly.
  void run_forward_pre_hooks();
  // Runs the exit hooks, in reverse order of registration. Never throws.
  void run_forward_exit_hooks() noexcept;

 private:
  std::shared_ptr<detail::HookTable> hooks_ = std::make_shared<detail::HookTable>();
};

// A holder whose call runs the forward pre-hooks and then forward, the way
// PyTorch's Module.__call__ does.
template <typename Impl>
class ModuleHolder : public torch::nn::ModuleHolder<Impl> {
 public:
  using torch::nn::ModuleHolder<Impl>::ModuleHolder;

  template <typename... Args>
  decltype(auto) operator()(Args&&... args) {
    this->get()->run_forward_pre_hooks();
    Exit exit{*this->get()};
    return this->get()->forward(std::forward<Args>(args)...);
  }

 private:
  struct Exit {
    Module& module;
    ~Exit() { module.run_forward_exit_hooks(); }
  };
};

// RAII guard for entry points that are not forward (a VAE's decode, an
// encoder's encode): constructing it runs the module's pre-hooks, so the
// same residency guarantee holds (design.md §2 rule 9).
class ForwardScope {
 public:
  explicit ForwardScope(Module& module) : module_(module) { module.run_forward_pre_hooks(); }
  ForwardScope(const ForwardScope&) = delete;
  ForwardScope& operator=(const ForwardScope&) = delete;
  ForwardScope(ForwardScope&&) = delete;
  ForwardScope& operator=(ForwardScope&&) = delete;
  ~ForwardScope() { module_.run_forward_exit_hooks(); }

 private:
  Module& module_;
};

}  // namespace omni::nn

// Declares `Name` as an omni::nn::ModuleHolder of `NameImpl`, like TORCH_MODULE.
#define OMNI_MODULE(Name)                                     \
  class Name : public ::omni::nn::ModuleHolder<Name##Impl> {  \
   public:                                                    \
    using ::omni::nn::ModuleHolder<Name##Impl>::ModuleHolder; \
  }
