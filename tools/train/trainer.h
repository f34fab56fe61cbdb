// Trains models/tiny-shapes from nothing: the tokenizer on the prompt
// grammar, the VAE on drawn clips, then the text encoder jointly with both
// experts through the flow-matching loss (Note [Training the experts]).
//
//   TrainOptions options;                  // the shipped recipe
//   train_tiny_shapes(options, "models/tiny-shapes", std::cout);
//
// Seeded and single-threaded in its data; torch uses `threads` threads.
// Synchronous; prints progress to `log`.
#pragma once

#include <cstdint>
#include <filesystem>
#include <ostream>

#include "model_files.h"

namespace omni::train {

struct TrainOptions {
  std::uint64_t seed = 20261203;
  int threads = 2;
  ModelSizes sizes;

  // VAE: reconstruction (weighted MSE + L1) + kl_weight · ½mean², AdamW, cosine
  // decay, on random vae_crop² windows of vae_frames frames of drawn clips
  // (the VAE is convolutional and causal, so windows teach it the whole clip
  // at a fraction of the cost).
  int vae_steps = 3000;
  int vae_batch = 4;
  int vae_crop = 32;
  int vae_full_steps = 500;  // the last steps, on whole frames
  int vae_frames = 9;
  double vae_lr = 2e-3;
  double kl_weight = 1e-4;
  double latent_noise = 0.1;
  // Share of VAE clips drawn in random colours (Note [Colour jitter for the
  // VAE] in trainer.cpp).
  double vae_colour_jitter = 0.5;
  // A model directory whose vae/ is reused instead of training one (same
  // sizes); the rest of the run is what it would have been after training it.
  std::filesystem::path vae_from;  // Note [A nearly deterministic VAE] in trainer.cpp

  // SentencePiece model type of the tokenizer: "word" (a piece per word of
  // the grammar) or "unigram" (Note [Word pieces] in trainer.cpp).
  std::string tokenizer_type = "word";

  // Clips encoded once with the trained VAE for the expert phase.
  int dataset_clips = 2000;

  // Experts + text encoder: each step trains each expert on dit_batch clips.
  int dit_steps = 5000;
  int dit_batch = 16;
  // Fraction of steps whose prompts are padded to the pipeline's full 512
  // tokens (Note [Prompt length in training]).
  double full_padding = 0.25;
  double dit_lr = 1e-3;
  double prompt_dropout = 0.1;  // empty prompt, for classifier-free guidance
  // Extra weight of the latent cells the shape covers in the flow-matching
  // loss (Note [Weighting the shape] in trainer.cpp); 0: plain MSE.
  double dit_object_weight = 4.0;
  // Further weight of the cells where another shape would differ (Note
  // [Weighting the outline] in trainer.cpp); 0: none.
  double dit_outline_weight = 0.0;
  // Weight of the shape-word contrast on the clips below the expert boundary
  // (Note [Contrasting the shape word] in trainer.cpp); 0: none.
  double dit_shape_contrast = 0.0;
  // How much larger the error with another shape's word must be than with
  // the right one, relatively, before the contrast stops pushing.
  double dit_shape_margin = 0.25;
  // A model directory whose text encoder and experts (unified: reasoner and
  // generator; same sizes and tokenizer) are the starting point instead of
  // fresh weights: the shipped recipe's second run (scripts/train-tiny-shapes)
  // and probes that fine-tune a trained model.
  std::filesystem::path experts_from;
  double ema_decay = 0.995;

  int log_every = 50;
  // Write the directory (EMA weights so far) every this many expert steps; 0: only at the end.
  int checkpoint_every = 500;

  // The few-steps recipe CI runs (tiny sizes, a handful of steps).
  static TrainOptions smoke();
  // ConfigError-style std::invalid_argument naming the field.
  void validate() const;
};

// Torch intra-op threads, one OpenBLAS thread, denormals flushed to zero
// (Note [CPU threads on a shared machine] in trainer.cpp). Process-wide.
void configure_cpu(int threads);

// For a program's main(), before anything else: when OMP_WAIT_POLICY is not
// set, sets it to PASSIVE and re-executes the program with the same
// arguments (OpenMP reads it only at start-up). Returns when it is set.
void ensure_passive_openmp(char** argv);

// Trains and writes the diffusers directory `out_dir` (created; existing
// component files are replaced).
void train_tiny_shapes(const TrainOptions& options, const std::filesystem::path& out_dir,
                       std::ostream& log);

}  // namespace omni::train
