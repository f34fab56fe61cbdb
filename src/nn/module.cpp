#include "omni/nn/module.h"

#include <vector>

namespace omni::nn {

void HookHandle::remove() noexcept {
  if (auto table = table_.lock()) table->hooks.erase(id_);
  table_.reset();
}

bool HookHandle::active() const {
  auto table = table_.lock();
  return table && table->hooks.count(id_) != 0;
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
