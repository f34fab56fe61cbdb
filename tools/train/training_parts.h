// The pieces of the tiny-shapes training that more than one recipe uses: the
// two-expert trainer (trainer.cpp) and the unified split model
// (unified_trainer.cpp). Internal to tools/train; trainer.h is the public
// entry point.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model_files.h"
#include "omni/io/tokenizer.h"
#include "shapes.h"
#include "trainer.h"

namespace omni::train::parts {

using Clock = std::chrono::steady_clock;

// Gives `clip` random foreground and background colours, at least 80 apart in
// sRGB, whose nearest palette colours do not make a held-out combination
// (Note [Colour jitter for the VAE], trainer.cpp).
void jitter_colours(std::mt19937_64& rng, ShapeClip& clip);
double seconds_since(Clock::time_point start);

// Note [Initialisation] (trainer.cpp): biases 0, norm scales 1, embeddings
// N(0, 1), other matrices N(0, 1/fan_in) (query projections a further
// `query_scale`), `proj_out.*` 0, scale_shift_tables as constructed. Names
// are matched relative to `module`.
void initialise(torch::nn::Module& module, double query_scale = 1.0);

void set_lr(torch::optim::AdamW& optimizer, double lr);
// Linear warm-up, then cosine decay to 10% of the peak.
double scheduled_lr(double peak, int step, int total);

// The VAE of an earlier run's directory (TrainOptions::vae_from); its config
// must be `configs.vae` but for the latent statistics, which are measured
// again. std::runtime_error when the sizes differ.
models::wan::AutoencoderKLWan load_trained_vae(const std::filesystem::path& model_dir,
                                               const ComponentConfigs& configs, std::ostream& log);

// Posterior means of `count` fresh training clips, per-channel normalised
// (the statistics go into the VAE config, which the pipeline un-normalises
// with), and their prompts.
struct LatentSet {
  torch::Tensor latents;  // [N, z, T, h, w], normalised
  torch::Tensor object;   // [N, 1, T, h, w]: 1 on latent cells the shape touches, else 0
  // [N, 1, T, h, w]: 1 on latent cells where another shape drawn at the same
  // place would cover other pixels (Note [Weighting the outline]), else 0;
  // undefined when the run does not weigh the outline.
  torch::Tensor outline;
  std::vector<std::string> prompts;
};

// A pixel mask [B, 1, F, H, W] (F = 1 + temporal·k) on the latent grid [B, 1,
// 1 + k, H/spatial, W/spatial]: a cell is 1 when any pixel of its window is.
// The first latent frame is frame 0 alone and each later one the next
// `temporal` frames, as the Wan VAE's causal time compression groups them.
torch::Tensor latent_cells(const torch::Tensor& mask, std::int64_t spatial, std::int64_t temporal);
// A pixel mask [1, F, H, W] of `clip`: 1 where the drawn clip differs from its
// background.
torch::Tensor shape_pixels(const ShapeClip& clip);
// [1, F, H, W]: 1 on the pixels where `clip`'s shape and either other shape of
// the grammar, drawn at the same place and size, differ.
torch::Tensor outline_pixels(const ShapeClip& clip);
LatentSet encode_dataset(const TrainOptions& o, models::wan::AutoencoderKLWan& vae,
                         ComponentConfigs& configs, std::mt19937_64& rng, std::ostream& log);

// Note [Training the experts] (trainer.cpp): σ = shift·u / (1 + (shift − 1)·u)
// for u uniform, and its inverse.
double shifted_sigma(double u);
double unshifted(double sigma);

// One training example: a random clip of `data` and its prompt, replaced by
// "" with probability `prompt_dropout` (classifier-free guidance).
struct Example {
  std::int64_t index = 0;
  std::string prompt;
};
Example draw_example(std::mt19937_64& rng, const LatentSet& data, double prompt_dropout);

// Rectified-flow inputs for clips `index` of `data` at noise levels
// `sigmas`: x_σ = (1 − σ)·x₀ + σ·ε with ε from torch's generator, the target
// velocity ε − x₀, the timesteps 1000·σ and the loss weight of each latent
// cell, 1 + object_weight on the shape (Note [Weighting the shape]) +
// outline_weight where the shapes differ (Note [Weighting the outline]).
struct FlowBatch {
  torch::Tensor noisy;
  torch::Tensor target;
  torch::Tensor timestep;
  torch::Tensor weight;  // [B, 1, T, h, w]
};
FlowBatch flow_matching_batch(const LatentSet& data, const std::vector<std::int64_t>& index,
                              const std::vector<float>& sigmas, double object_weight,
                              double outline_weight);

// Σ weight·(prediction − target)² / Σ weight over every channel: the MSE
// when the weights are all equal.
torch::Tensor weighted_mse(const torch::Tensor& prediction, const torch::Tensor& target,
                           const torch::Tensor& weight);

// `prompt` (one of the grammar's) with its shape word replaced by another
// shape's, drawn with `rng` among those that do not make a held-out
// combination (Note [Contrasting the shape word], trainer.cpp); "" for a
// prompt that is not the grammar's (the empty one) or when no shape qualifies.
std::string other_shape_prompt(const std::string& prompt, std::mt19937_64& rng);

// Per clip, e = Σ mask·(prediction − target)² / (C·Σ mask) with the right
// prompt's prediction (`right`) and another shape's (`swapped`), both [B, C,
// T, h, w] against `target`, `mask` [B, 1, T, h, w]; returns the mean over
// clips of max(0, (1 + margin)·e_right − e_swapped).
torch::Tensor shape_contrast(const torch::Tensor& right, const torch::Tensor& swapped,
                             const torch::Tensor& target, const torch::Tensor& mask, double margin);

// Note [Contrasting the shape word] on one batch: each row i with
// eligible[i] and a grammar prompt gets another shape's prompt (drawn with
// `rng`, rows in order); predict_again(rows, their new prompts) predicts
// those rows again, and the result is shape_contrast of `prediction`'s rows
// against it over the shape's and outline's cells of `clips`' latents.
// Undefined when no row qualifies.
using PredictAgainFn =
    std::function<torch::Tensor(const torch::Tensor& rows, const std::vector<std::string>&)>;
torch::Tensor shape_word_contrast(const LatentSet& data, const std::vector<std::int64_t>& clips,
                                  const std::vector<std::string>& prompts,
                                  const std::vector<bool>& eligible,
                                  const torch::Tensor& prediction, const torch::Tensor& target,
                                  double margin, std::mt19937_64& rng,
                                  const PredictAgainFn& predict_again);

// TrainOptions::experts_from: std::runtime_error unless the model's
// `config_file` holds `wanted` ("sizes differ") and its tokenizer (next to
// it in `model_dir`) encodes every prompt of the grammar as `tokenizer` does.
void check_same_config(const std::filesystem::path& config_file, const nlohmann::json& wanted);
void check_same_tokenizer(const std::filesystem::path& model_dir, const io::Tokenizer& tokenizer);

// Tokens of the longest of `prompts` (and of ""), EOS included.
std::int64_t longest_prompt_tokens(const io::Tokenizer& tokenizer,
                                   const std::vector<std::string>& prompts);

// zero_grad, backward, gradients clipped to norm 1, step.
void optimizer_step(torch::optim::AdamW& optimizer, const torch::Tensor& loss,
                    const std::vector<torch::Tensor>& params);

// An exponential moving average of trained parameters; the average's decay
// warms up as min(decay, (1 + step)/(10 + step)). The weights a run saves.
class EmaWeights {
 public:
  explicit EmaWeights(std::vector<torch::Tensor> params);
  void update(int step, double decay);
  // Calls `fn` with the averages in place of the trained values, then puts
  // the trained values back.
  void with_average(const std::function<void()>& fn);
  // Replaces the trained values by the averages for good (the end of a run).
  void install();

 private:
  std::vector<torch::Tensor> params_;
  std::vector<torch::Tensor> average_;
};

// The start of a training run: options validated, CPU configured, torch's
// generator and `rng` seeded with o.seed, the configs of o.sizes, `out_dir`
// created.
struct TrainingRun {
  std::mt19937_64 rng;
  Clock::time_point start;
  ComponentConfigs configs;
};
TrainingRun begin_run(const TrainOptions& o, const std::filesystem::path& out_dir);

// What the expert phase trains on: the VAE (trained, or vae_from's) and the
// dataset encoded with it (the latent statistics go into configs.vae). Each
// phase has its own seed, o.seed + 1 for the data; `rng` and torch's
// generator are left seeded with o.seed + 2 for the next phase.
struct TrainingData {
  models::wan::AutoencoderKLWan vae;
  LatentSet data;
};
TrainingData prepare_training_data(const TrainOptions& o, ComponentConfigs& configs,
                                   std::mt19937_64& rng, std::ostream& log);

// "12 s (eta 30 s)": the time since `start` after `done` of `total` steps,
// and the time the rest would take at that pace.
std::string elapsed_and_eta(Clock::time_point start, int done, int total);

// Whether the EMA weights are written after expert-phase step `step`
// (0-based): every checkpoint_every steps, but not after the last.
bool checkpoint_due(const TrainOptions& o, int step);

// "wrote DIR in N s".
void log_written(std::ostream& log, const std::filesystem::path& out_dir, Clock::time_point start);

// Writes `json` (indented) to `path`, creating its folder.
void write_json(const std::filesystem::path& path, const nlohmann::json& json);
// Saves `module`'s state as float32 safetensors (skipping `skip` buffers).
void save_float32(const torch::nn::Module& module, const std::filesystem::path& file,
                  const std::vector<std::string>& skip = {});

}  // namespace omni::train::parts
