#include "omni/nn/module.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace {

class AddOneImpl : public omni::nn::Module {
 public:
  torch::Tensor forward(const torch::Tensor& x) {
    calls.push_back("forward");
    return x + 1;
  }
  std::vector<std::string> calls;
};
OMNI_MODULE(AddOne);

}  // namespace

TEST(Module, HooksRunInOrderBeforeForward) {
  AddOne m;
  auto h1 = m->register_forward_pre_hook([&](omni::nn::Module&) { m->calls.push_back("h1"); });
  auto h2 = m->register_forward_pre_hook([&](omni::nn::Module&) { m->calls.push_back("h2"); });
  auto y = m(torch::zeros({2}));
  EXPECT_TRUE(torch::equal(y, torch::ones({2})));
  EXPECT_EQ(m->calls, (std::vector<std::string>{"h1", "h2", "forward"}));
}

TEST(Module, RemovingHandleUnregisters) {
  AddOne m;
  int count = 0;
  {
    auto handle = m->register_forward_pre_hook([&](omni::nn::Module&) { ++count; });
    m(torch::zeros({1}));
    EXPECT_TRUE(handle.active());
  }  // destroyed: removed
  m(torch::zeros({1}));
  EXPECT_EQ(count, 1);
  EXPECT_EQ(m->num_forward_pre_hooks(), 0u);

  auto handle = m->register_forward_pre_hook([&](omni::nn::Module&) { ++count; });
  handle.remove();
  handle.remove();  // idempotent
  m(torch::zeros({1}));
  EXPECT_EQ(count, 1);
}

TEST(Module, HandleMayOutliveModule) {
  omni::nn::HookHandle handle;
  {
    AddOne m;
    handle = m->register_forward_pre_hook([](omni::nn::Module&) {});
    EXPECT_TRUE(handle.active());
  }
  EXPECT_FALSE(handle.active());
  handle.remove();  // must not touch freed memory
}

TEST(Module, HookExceptionStopsForward) {
  AddOne m;
  auto h = m->register_forward_pre_hook([](omni::nn::Module&) { throw std::runtime_error("no"); });
  EXPECT_THROW(m(torch::zeros({1})), std::runtime_error);
  EXPECT_TRUE(m->calls.empty());
}

TEST(Module, ForwardScopeRunsHooksForOtherEntryPoints) {
  AddOne m;
  int count = 0;
  auto h = m->register_forward_pre_hook([&](omni::nn::Module&) { ++count; });
  { omni::nn::ForwardScope scope(*m); }
  EXPECT_EQ(count, 1);
  m->forward(torch::zeros({1}));  // calling forward directly bypasses hooks, as in PyTorch
  EXPECT_EQ(count, 1);
}

TEST(Module, HookMayRemoveItselfWhileRunning) {
  AddOne m;
  omni::nn::HookHandle handle;
  int count = 0;
  handle = m->register_forward_pre_hook([&](omni::nn::Module&) {
    ++count;
    handle.remove();
  });
  m(torch::zeros({1}));
  m(torch::zeros({1}));
  EXPECT_EQ(count, 1);
}
