// Component discovery: the four role lists a pipeline declares (the seed's
// SupportsComponentDiscovery) and their resolution to modules
// (design.md §2 rule 1). Resolution happens before anything moves.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "omni/nn/module.h"

namespace omni::offload {

// `split`: a mutually exclusive sub-component of a split model (the seed's
// Cosmos3 case), registered by the model itself, never by discovery.
enum class Role { dit, encoder, vae, resident, split };
std::string_view to_string(Role role);

// Where a component's weights are right now: `partial` while its block
// groups stream in or out (some on the device, the rest at home).
enum class Residency { host, partial, device };
std::string_view to_string(Residency residency);

// Dotted paths into the pipeline's module tree, per role.
struct ComponentSpec {
  std::vector<std::string> dit_modules;
  std::vector<std::string> encoder_modules;
  std::vector<std::string> vae_modules;
  std::vector<std::string> resident_modules;
};

struct ResolvedComponent {
  std::string path;
  Role role;
  std::shared_ptr<nn::Module> module;
};

// Resolves every declared path to its module. ConfigError, naming the path and
// listing the root's real top-level children, when a path names no module (or
// a module that is not an omni::nn::Module and so cannot carry hooks), when a
// module is claimed by two roles or listed twice, or when a path is nested
// inside another claimed path. With `require_exclusion_groups`, empty DiT or
// encoder lists are an error too (both are needed for mutual exclusion).
std::vector<ResolvedComponent> resolve_components(torch::nn::Module& root,
                                                  const ComponentSpec& spec,
                                                  bool require_exclusion_groups);

// Follows a dotted path ("pipe.transformer"); nullptr when it names nothing.
std::shared_ptr<torch::nn::Module> find_module(torch::nn::Module& root, std::string_view path);

}  // namespace omni::offload
