// The per-component dtype of a load (Note [Dtype from the checkpoint]).
#include "omni/pipelines/dtype_spec.h"

#include "omni/error.h"

namespace omni::pipelines {

namespace {

constexpr const char* kAccepted = "auto, float32 (fp32), bfloat16 (bf16) or float16 (fp16)";

std::string_view trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

// nullopt for "auto".
std::optional<torch::ScalarType> parse_item_dtype(std::string_view name, std::string_view spec) {
  if (name == "auto") return std::nullopt;
  try {
    return parse_dtype_name(name);
  } catch (const ConfigError&) {
    throw ConfigError(
        detail::concat("dtype '", spec, "': unknown dtype '", name, "'; expected ", kAccepted));
  }
}

bool is_component_name(std::string_view name) {
  if (name.empty()) return false;
  for (const char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-'))
      return false;
  return true;
}

}  // namespace

torch::ScalarType parse_dtype_name(std::string_view name) {
  if (name == "float32" || name == "fp32") return torch::kFloat32;
  if (name == "bfloat16" || name == "bf16") return torch::kBFloat16;
  if (name == "float16" || name == "fp16") return torch::kFloat16;
  throw ConfigError(detail::concat(
      "unknown dtype '", name, "': expected float32 (fp32), bfloat16 (bf16) or float16 (fp16)"));
}

std::string dtype_name(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kFloat32:
      return "float32";
    case torch::kBFloat16:
      return "bfloat16";
    case torch::kFloat16:
      return "float16";
    default:
      return c10::toString(dtype);
  }
}

DtypeSpec DtypeSpec::parse(std::string_view text) {
  DtypeSpec spec;
  bool has_default = false;
  std::string_view rest = text;
  OMNI_CHECK(!trim(text).empty(), ConfigError, "dtype must not be empty; expected ", kAccepted,
             ", or COMPONENT=DTYPE items (e.g. transformer=bfloat16,vae=float32)");
  while (true) {
    const auto comma = rest.find(',');
    const auto item = trim(rest.substr(0, comma));
    OMNI_CHECK(!item.empty(), ConfigError, "dtype '", text, "': empty item");
    const auto eq = item.find('=');
    if (eq == std::string_view::npos) {
      OMNI_CHECK(!has_default, ConfigError, "dtype '", text,
                 "': more than one dtype for every component");
      has_default = true;
      spec.all_ = parse_item_dtype(item, text);
    } else {
      const auto component = trim(item.substr(0, eq));
      const auto dtype = trim(item.substr(eq + 1));
      OMNI_CHECK(is_component_name(component), ConfigError, "dtype '", text, "': '", component,
                 "' is not a component name (expected COMPONENT=DTYPE, e.g. vae=float32)");
      OMNI_CHECK(!spec.by_component_.count(std::string(component)), ConfigError, "dtype '", text,
                 "': component '", component, "' is given twice");
      spec.by_component_[std::string(component)] = parse_item_dtype(dtype, text);
    }
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  return spec;
}

std::string DtypeSpec::to_string() const {
  std::string out = all_ ? dtype_name(*all_) : (by_component_.empty() ? "auto" : "");
  for (const auto& [component, dtype] : by_component_)
    out += (out.empty() ? "" : ",") + component + "=" + (dtype ? dtype_name(*dtype) : "auto");
  return out;
}

std::optional<torch::ScalarType> DtypeSpec::for_component(const std::string& component,
                                                          bool is_vae) const {
  if (auto it = by_component_.find(component); it != by_component_.end()) return it->second;
  return is_vae ? std::nullopt : all_;
}

void DtypeSpec::check_components(const std::vector<std::string>& components,
                                 const std::string& source) const {
  for (const auto& [component, dtype] : by_component_) {
    if (std::find(components.begin(), components.end(), component) != components.end()) continue;
    std::string list;
    for (const auto& c : components) list += (list.empty() ? "" : ", ") + c;
    throw ConfigError(detail::concat(source, ": --dtype names component '", component,
                                     "', which this model does not have; components with "
                                     "weights: ",
                                     list.empty() ? "(none)" : list));
  }
}

}  // namespace omni::pipelines
