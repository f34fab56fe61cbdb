// Trains the unified split model (OmniUnifiedPipeline, models/tiny-shapes-unified)
// on the tiny-shapes data: a causal reasoner that reads the prompt once and
// ONE generator for every noise level, trained jointly through the
// flow-matching loss of the two-expert recipe (Note [Training the unified
// model] in unified_trainer.cpp).
//
//   TrainOptions options;                              // the expert phase's settings
//   options.vae_from = "models/tiny-shapes";           // required
//   train_tiny_shapes_unified(options, "models/tiny-shapes-unified", std::cout);
//
// It never trains a VAE: vae_from's vae/ (same ModelSizes) and tokenizer/
// are reused, as omni-train --vae-from reuses them. experts_from (a trained
// unified model) and dit_shape_contrast work as in the two-expert recipe.
// Seeded; synchronous; prints progress to `log`.
#pragma once

#include <filesystem>
#include <ostream>

#include <nlohmann/json.hpp>

#include "model_files.h"
#include "trainer.h"

namespace omni::train {

// Prompt tokens the reasoner takes: the grammar's longest prompt is about 40
// pieces of the small tokenizer (EOS included), so 64 leaves room.
inline constexpr std::int64_t kUnifiedMaxTokens = 64;

// transformer/config.json of the unified model: the reasoner is as wide and
// deep as the two-expert recipe's text encoder (text_dim, text_layers), with
// text_dim / 16 heads and a 4 × text_dim MLP; the generator is that recipe's
// expert config (component_configs(sizes).transformer).
nlohmann::json unified_transformer_config(const ModelSizes& sizes);

// Trains and writes the OmniUnifiedPipeline directory `out_dir` (created;
// existing component files are replaced). std::invalid_argument when
// options.vae_from is empty or options are invalid; std::runtime_error when
// vae_from's VAE has other sizes or it has no tokenizer, or experts_from's
// transformer config or tokenizer is not this run's.
void train_tiny_shapes_unified(const TrainOptions& options, const std::filesystem::path& out_dir,
                               std::ostream& log);

}  // namespace omni::train
