#include "omni/offload/components.h"

#include <map>
#include <set>

#include "omni/error.h"

namespace omni::offload {

std::string_view to_string(Role role) {
  switch (role) {
    case Role::dit:
      return "dit";
    case Role::encoder:
      return "encoder";
    case Role::vae:
      return "vae";
    case Role::resident:
      return "resident";
    case Role::split:
      return "split";
  }
  return "?";
}

std::string_view to_string(Residency residency) {
  switch (residency) {
    case Residency::host:
      return "host";
    case Residency::partial:
      return "partial";
    case Residency::device:
      return "device";
  }
  return "?";
}

std::shared_ptr<torch::nn::Module> find_module(torch::nn::Module& root, std::string_view path) {
  std::shared_ptr<torch::nn::Module> current;
  torch::nn::Module* node = &root;
  std::size_t start = 0;
  while (start <= path.size()) {
    const auto dot = path.find('.', start);
    const auto part = path.substr(start, dot == std::string_view::npos ? path.npos : dot - start);
    if (part.empty()) return nullptr;
    std::shared_ptr<torch::nn::Module> next;
    for (const auto& child : node->named_children())
      if (child.key() == part) next = child.value();
    if (!next) return nullptr;
    current = next;
    node = current.get();
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return current;
}

namespace {

std::string role_list_name(Role role) {
  switch (role) {
    case Role::dit:
      return "dit_modules";
    case Role::encoder:
      return "encoder_modules";
    case Role::vae:
      return "vae_modules";
    case Role::resident:
      return "resident_modules";
    case Role::split:
      return "split components";
  }
  return "?";
}

std::string children_of(torch::nn::Module& root) {
  std::string out;
  for (const auto& child : root.named_children()) out += (out.empty() ? "" : ", ") + child.key();
  return out.empty() ? "(none)" : out;
}

bool is_descendant(torch::nn::Module& ancestor, const torch::nn::Module* candidate) {
  for (const auto& m : ancestor.modules(/*include_self=*/false))
    if (m.get() == candidate) return true;
  return false;
}

}  // namespace

std::vector<ResolvedComponent> resolve_components(torch::nn::Module& root,
                                                  const ComponentSpec& spec,
                                                  bool require_exclusion_groups) {
  const std::string children = children_of(root);
  const std::string root_name = root.name();
  if (require_exclusion_groups) {
    OMNI_CHECK(!spec.dit_modules.empty(), ConfigError, root_name,
               ": offload needs at least one entry in dit_modules (both DiT and encoder lists are "
               "required for mutual exclusion); top-level children: ",
               children);
    OMNI_CHECK(!spec.encoder_modules.empty(), ConfigError, root_name,
               ": offload needs at least one entry in encoder_modules (both DiT and encoder lists "
               "are required for mutual exclusion); top-level children: ",
               children);
  }
  std::vector<ResolvedComponent> out;
  const std::pair<Role, const std::vector<std::string>*> lists[] = {
      {Role::dit, &spec.dit_modules},
      {Role::encoder, &spec.encoder_modules},
      {Role::vae, &spec.vae_modules},
      {Role::resident, &spec.resident_modules}};
  for (const auto& [role, paths] : lists) {
    for (const auto& path : *paths) {
      auto module = find_module(root, path);
      OMNI_CHECK(module != nullptr, ConfigError, root_name, ": ", role_list_name(role), " entry '",
                 path, "' names no module; top-level children: ", children);
      auto hookable = std::dynamic_pointer_cast<nn::Module>(module);
      OMNI_CHECK(hookable != nullptr, ConfigError, root_name, ": ", role_list_name(role),
                 " entry '", path, "' is a ", module->name(),
                 ", which is not an omni::nn::Module and cannot carry hooks; top-level children: ",
                 children);
      for (const auto& other : out) {
        if (other.module.get() == hookable.get()) {
          if (other.role == role)
            throw ConfigError(detail::concat(root_name, ": module '", path, "' is listed twice in ",
                                             role_list_name(role),
                                             other.path == path ? "" : " (as '" + other.path + "')",
                                             "; top-level children: ", children));
          throw ConfigError(detail::concat(root_name, ": module '", path, "' is claimed by both ",
                                           role_list_name(other.role), " ('", other.path, "') and ",
                                           role_list_name(role),
                                           "; top-level children: ", children));
        }
        const bool inside =
            path.starts_with(other.path + ".") || is_descendant(*other.module, hookable.get());
        const bool contains =
            other.path.starts_with(path + ".") || is_descendant(*hookable, other.module.get());
        OMNI_CHECK(!inside, ConfigError, root_name, ": ", role_list_name(role), " entry '", path,
                   "' is nested inside '", other.path, "' (", role_list_name(other.role),
                   "); top-level children: ", children);
        OMNI_CHECK(!contains, ConfigError, root_name, ": ", role_list_name(other.role), " entry '",
                   other.path, "' is nested inside '", path, "' (", role_list_name(role),
                   "); top-level children: ", children);
      }
      out.push_back({path, role, hookable});
    }
  }
  return out;
}

}  // namespace omni::offload
