#include "omni/offload/components.h"

#include <gtest/gtest.h>

#include "offload/toy_pipeline.h"
#include "omni/error.h"

using omni::ConfigError;
using omni::offload::resolve_components;
using omni::offload::Role;

namespace {
std::string error_of(toy::ToyPipeline& p, const omni::offload::ComponentSpec& s,
                     bool require = true) {
  try {
    resolve_components(p, s, require);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}
void expect_contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "expected '" << part << "' in: " << text;
}
}  // namespace

TEST(Discovery, ResolvesDottedPathsInRoleOrder) {
  toy::ToyPipeline p({"text_encoder"}, {"transformer", "transformer_2"});
  auto r = resolve_components(
      p, toy::spec({"transformer", "transformer_2"}, {"text_encoder"}, {"vae"}, {"group.inner"}),
      true);
  ASSERT_EQ(r.size(), 5u);
  EXPECT_EQ(r[0].path, "transformer");
  EXPECT_EQ(r[0].role, Role::dit);
  EXPECT_EQ(r[2].role, Role::encoder);
  EXPECT_EQ(r[4].path, "group.inner");
  EXPECT_EQ(r[4].role, Role::resident);
  EXPECT_EQ(r[4].module.get(), p.inner.ptr().get());
}

TEST(Discovery, PathThatNamesNoModuleListsTopLevelChildren) {
  toy::ToyPipeline p({"text_encoder"}, {"transformer"});
  auto msg = error_of(p, toy::spec({"transformr"}, {"text_encoder"}));
  expect_contains(msg, "dit_modules entry 'transformr' names no module");
  expect_contains(msg, "top-level children: text_encoder, transformer, vae, group");
  msg = error_of(p, toy::spec({"transformer"}, {"group.missing"}));
  expect_contains(msg, "encoder_modules entry 'group.missing' names no module");
  msg = error_of(p, toy::spec({"transformer"}, {"text_encoder."}));
  expect_contains(msg, "'text_encoder.' names no module");
}

TEST(Discovery, ModuleThatCannotCarryHooksIsRejected) {
  toy::ToyPipeline p({"text_encoder"}, {"transformer"});
  auto msg = error_of(p, toy::spec({"transformer"}, {"text_encoder"}, {"vae.blocks"}));
  expect_contains(msg, "vae_modules entry 'vae.blocks'");
  expect_contains(msg, "cannot carry hooks");
}

TEST(Discovery, ModuleClaimedByTwoRoles) {
  toy::ToyPipeline p({"text_encoder"}, {"transformer"});
  auto msg = error_of(p, toy::spec({"transformer"}, {"text_encoder", "transformer"}));
  expect_contains(
      msg,
      "module 'transformer' is claimed by both dit_modules ('transformer') and encoder_modules");
  expect_contains(msg, "top-level children:");
  msg = error_of(p, toy::spec({"transformer", "transformer"}, {"text_encoder"}));
  expect_contains(msg, "listed twice in dit_modules");
}

TEST(Discovery, PathNestedInsideAnotherClaimedPath) {
  toy::ToyPipeline p({"text_encoder"}, {"transformer"});
  auto msg = error_of(p, toy::spec({"transformer"}, {"text_encoder"}, {"vae"}, {"group"}));
  EXPECT_EQ(msg, "no error") << "group alone is fine";
  msg = error_of(p, toy::spec({"group"}, {"text_encoder"}, {"vae"}, {"group.inner"}));
  expect_contains(msg,
                  "resident_modules entry 'group.inner' is nested inside 'group' (dit_modules)");
  msg = error_of(p, toy::spec({"group.inner"}, {"group"}));
  expect_contains(msg,
                  "dit_modules entry 'group.inner' is nested inside 'group' (encoder_modules)");
}

TEST(Discovery, OffloadNeedsBothDitAndEncoderLists) {
  toy::ToyPipeline p({"text_encoder"}, {"transformer"});
  expect_contains(error_of(p, toy::spec({}, {"text_encoder"})),
                  "at least one entry in dit_modules");
  expect_contains(error_of(p, toy::spec({"transformer"}, {})),
                  "at least one entry in encoder_modules");
  EXPECT_EQ(error_of(p, toy::spec({"transformer"}, {}), /*require=*/false), "no error");
}
