// Named request settings applied over a model's defaults (--preset).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "omni/pipelines/pipeline.h"

namespace omni::pipelines {

// Note [Request presets]
// A preset fills the fields of a request that the request leaves unset, so
// it applies over the model's defaults and under the user's own values.
// - lightning: Wan2.2-Lightning / lightx2v's 4-step distill LoRAs: 4 steps,
//   guidance_scale 1 on both experts (no unconditional pass: one DiT call a
//   step), flow shift 5. The sampler is the model's scheduler (Lightning
//   trains for flow-matching Euler; a model whose scheduler_config.json
//   names UniPC runs UniPC with these settings).

// `request` with `preset`'s values in the fields it leaves unset.
// InvalidRequest naming the known presets when `preset` is none of them.
GenerationRequest apply_preset(GenerationRequest request, std::string_view preset);
// The names apply_preset accepts.
std::vector<std::string> preset_names();

}  // namespace omni::pipelines
