#include <algorithm>
#include <mutex>
#include <utility>
#include <vector>

#include "omni/error.h"
#include "omni/io/hub_cache.h"
#include "omni/io/json_config.h"
#include "omni/pipelines/omni_unified_pipeline.h"
#include "omni/pipelines/pipeline.h"
#include "omni/pipelines/wan_pipeline.h"
#include "omni/pipelines/wan_shaped_example.h"

namespace fs = std::filesystem;

namespace omni::pipelines {

namespace {
std::mutex registry_mutex;
// In registration order, which is the order error messages list them in.
std::vector<std::pair<std::string, PipelineFactory>>& registry() {
  // The library's own pipelines are listed here rather than registered by
  // static initialisers, which a static library would drop at link time.
  static std::vector<std::pair<std::string, PipelineFactory>> r = {
      {"WanPipeline", load_wan_pipeline}, {"OmniUnifiedPipeline", load_omni_unified_pipeline}};
  return r;
}

std::vector<std::pair<std::string, PipelineFactory>>::iterator find_factory(
    const std::string& class_name) {
  auto& r = registry();
  return std::find_if(r.begin(), r.end(), [&](const auto& e) { return e.first == class_name; });
}
}  // namespace

void register_pipeline(const std::string& class_name, PipelineFactory factory) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  if (auto it = find_factory(class_name); it != registry().end())
    it->second = std::move(factory);
  else
    registry().emplace_back(class_name, std::move(factory));
}

std::vector<std::string> builtin_models() {
  return {"example:wan-shaped"};
}

namespace {

std::shared_ptr<Pipeline> load_pipeline_unchecked(const std::string& model,
                                                  const LoadOptions& options) {
  if (model == "example:wan-shaped") {
    OMNI_CHECK(options.dtype.is_auto() || options.dtype == DtypeSpec(torch::kFloat32), ConfigError,
               "example:wan-shaped is built in float32; dtype must be auto or float32, got '",
               options.dtype.to_string(), "'");
    return make_wan_shaped_example();
  }
  OMNI_CHECK(!model.starts_with("example:"), ConfigError, "unknown built-in model '", model,
             "'; built-ins: example:wan-shaped");
  const fs::path dir = io::resolve_model_dir(model);
  const auto index_path = dir / "model_index.json";
  OMNI_CHECK(fs::exists(index_path), FormatError, model,
             ": no model_index.json (expected a diffusers model directory)");
  const auto index = io::read_json_file(index_path);
  OMNI_CHECK(index.is_object() && index.contains("_class_name") && index["_class_name"].is_string(),
             FormatError, index_path.string(), ": missing '_class_name'");
  const auto class_name = index["_class_name"].get<std::string>();
  PipelineFactory factory;
  std::string known;
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    if (auto it = find_factory(class_name); it != registry().end()) factory = it->second;
    for (const auto& [name, f] : registry()) known += (known.empty() ? "" : ", ") + name;
  }
  OMNI_CHECK(factory != nullptr, ConfigError, index_path.string(), ": pipeline class '", class_name,
             "' is not supported; supported: ", known.empty() ? "(none)" : known);
  return factory(dir, options);
}

}  // namespace

std::shared_ptr<Pipeline> load_pipeline(const std::string& model, const LoadOptions& options) {
  return detail::with_typed_filesystem_errors(
      [&] { return load_pipeline_unchecked(model, options); });
}

}  // namespace omni::pipelines
