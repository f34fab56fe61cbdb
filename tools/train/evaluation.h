// Generating the fixed evaluation prompts (quality.h) with a loaded pipeline
// and scoring what it drew.
//
//   auto pipe = omni::pipelines::load_pipeline("models/tiny-shapes");
//   auto result = evaluate_model(*pipe, evaluation_cases(12), {});
//   std::cout << format_report(result);
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "omni/pipelines/pipeline.h"
#include "quality.h"

namespace omni::train {

struct EvalOptions {
  std::optional<int> steps;  // null: the pipeline's default
  std::optional<double> guidance_scale;
  int size = 64;
  int num_frames = 9;
  // evaluate_from_noised only: the prompt names this shape instead of the
  // drawn one (scores still compare with the drawn clip), to see whether the
  // experts follow the shape word or the shape they are given.
  std::optional<Shape> prompt_shape;
};

struct CaseResult {
  EvalCase eval;
  std::string prompt;
  ClipMeasurement measured;
  ClipScore score;
  torch::Tensor frames;  // uint8 [F, H, W, 3]
};

struct EvalResult {
  std::vector<CaseResult> cases;
  QualityTally seen;      // combinations drawn in training
  QualityTally held_out;  // Note [Held-out combinations]
};

// Runs every case through pipe.resolve() and pipe.run() on the CPU, under
// InferenceMode, one at a time. Synchronous.
EvalResult evaluate_model(pipelines::Pipeline& pipe, const std::vector<EvalCase>& cases,
                          const EvalOptions& options);

// The VAE alone: each case's spec drawn (shapes.h, placed from its seed),
// encoded to the posterior mean and decoded, then measured like a generated
// clip. The upper bound of what the experts can reach through this VAE.
// `pipe` is a WanPipeline or an OmniUnifiedPipeline (their VAEs are alike).
EvalResult evaluate_reconstruction(pipelines::Pipeline& pipe, const std::vector<EvalCase>& cases);

// Note [Denoising a drawn clip]
// Where the experts lose the shape: each case's spec is drawn and encoded as
// in evaluate_reconstruction, noised to the first noise level of the
// pipeline's schedule at or below `sigma_start`, or its last step's (x =
// (1 − σ)·x₀ + σ·ε, x₀ normalised as the pipeline's latents, ε the case's
// initial noise), then denoised by WanPipeline::denoise from that step on
// (DenoiseArgs::first_step), with the case's prompt (EvalOptions::prompt_shape aside) and the
// pipeline's guidance, and decoded. σ near 0 measures the VAE; σ = 1 the whole generation; in
// between, whether the experts keep a shape they are given. `pipe` must be a WanPipeline;
// std::invalid_argument otherwise or when sigma_start is outside (0, 1].
EvalResult evaluate_from_noised(pipelines::Pipeline& pipe, const std::vector<EvalCase>& cases,
                                const EvalOptions& options, double sigma_start);

// One line per case, then the rates per split.
std::string format_report(const EvalResult& result);

// Rows of frames (every other frame) of the first `rows` cases: uint8 [H', W', 3].
torch::Tensor case_sheet(const std::vector<CaseResult>& cases, int rows);

}  // namespace omni::train
