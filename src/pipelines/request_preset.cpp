#include "omni/pipelines/request_preset.h"

#include "omni/error.h"

namespace omni::pipelines {

std::vector<std::string> preset_names() {
  return {"lightning"};
}

GenerationRequest apply_preset(GenerationRequest request, std::string_view preset) {
  // Note [Request presets].
  if (preset == "lightning") {
    if (!request.steps) request.steps = 4;
    if (!request.guidance_scale) request.guidance_scale = 1.0;
    if (!request.flow_shift) request.flow_shift = 5.0;
    return request;
  }
  std::string known;
  for (const auto& name : preset_names()) known += (known.empty() ? "" : ", ") + name;
  throw InvalidRequest(detail::concat("unknown preset '", preset, "' (known: ", known, ")"));
}

}  // namespace omni::pipelines
