#include "omni/nn/module.h"

#include <vector>

namespace omni::nn {

void HookHandle::remove() noexcept {
  if (auto table = table_.lock()) {
    table->hooks.erase(id_);
    table->exit_hooks.erase(id_);
  }
  table_.reset();
}

bool HookHandle::active() const {
  auto table = table_.lock();
  return table && (table->hooks.count(id_) != 0 || table->exit_hooks.count(id_) != 0);
}

HookHandle Module::register_forward_exit_hook(ForwardExitHook hook) {
  const auto id = hooks_->next_id++;
  hooks_->exit_hooks.emplace(id, std::move(hook));
  return HookHandle(hooks_, id);
}

void Module::run_forward_exit_hooks() noexcept {
  if (hooks_->exit_hooks.empty()) return;
  std::vector<ForwardExitHook> snapshot;
  for (auto it = hooks_->exit_hooks.rbegin(); it != hooks_->exit_hooks.rend(); ++it)
    snapshot.push_back(it->second);
  for (auto& hook : snapshot) {
    try {
      hook(*this);
    } catch (...) {
    }
  }
}

HookHandle Module::register_forward_pre_hook(ForwardPreHook hook) {
  const auto id = hooks_->next_id++;
  hooks_->hooks.emplace(id, std::move(hook));
  return HookHandle(hooks_, id);
}

void Module::run_forward_pre_hooks() {
  if (hooks_->hooks.empty()) return;
  // Copy first: a hook may remove itself or register another.
  std::vector<ForwardPreHook> snapshot;
  snapshot.reserve(hooks_->hooks.size());
  for (const auto& [id, hook] : hooks_->hooks) snapshot.push_back(hook);
  for (auto& hook : snapshot) hook(*this);
}

}  // namespace omni::nn
