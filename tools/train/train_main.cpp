// omni-train OUT_DIR [--smoke] [--seed N] [...]: trains models/tiny-shapes
// from nothing (trainer.h) and writes it as a diffusers directory.
// omni-train OUT_DIR --unified --vae-from DIR [...]: trains the unified split
// model (OmniUnifiedPipeline, unified_trainer.h) on the same data, reusing
// DIR's VAE and tokenizer.
// Exit status: 0 written; 1 training failed; 2 bad arguments.
#include <CLI/CLI.hpp>

#include <iostream>

#include "trainer.h"
#include "unified_trainer.h"

int main(int argc, char** argv) {
  omni::train::ensure_passive_openmp(argv);
  CLI::App app{"Trains the tiny-shapes Wan model (tools/train) and writes its directory"};
  std::string out_dir;
  bool smoke = false;
  bool unified = false;
  omni::train::TrainOptions o;
  app.add_option("out_dir", out_dir, "model directory to write")->required();
  app.add_flag("--smoke", smoke, "tiny sizes and a few steps (CI): checks the trainer runs");
  app.add_flag("--unified", unified,
               "train the unified split model (reasoner + one generator); needs --vae-from");
  // Parsed into a separate object so --smoke's recipe can be overridden per field.
  omni::train::TrainOptions f;
  app.add_option("--seed", f.seed, "seed of every random draw")->default_val(o.seed);
  app.add_option("--threads", f.threads, "torch threads")->default_val(o.threads);
  app.add_option("--vae-steps", f.vae_steps)->default_val(o.vae_steps);
  app.add_option("--vae-batch", f.vae_batch)->default_val(o.vae_batch);
  app.add_option("--vae-crop", f.vae_crop, "0: whole frames")->default_val(o.vae_crop);
  app.add_option("--vae-lr", f.vae_lr)->default_val(o.vae_lr);
  app.add_option("--vae-from", f.vae_from, "reuse MODEL_DIR/vae instead of training a VAE");
  app.add_option("--vae-full-steps", f.vae_full_steps, "last VAE steps on whole frames")
      ->default_val(o.vae_full_steps);
  app.add_option("--vae-colour-jitter", f.vae_colour_jitter,
                 "share of VAE clips drawn in random colours")
      ->default_val(o.vae_colour_jitter);
  app.add_option("--dit-object-weight", f.dit_object_weight,
                 "extra loss weight of the latent cells the shape covers (0: plain MSE)")
      ->default_val(o.dit_object_weight);
  app.add_option("--dit-outline-weight", f.dit_outline_weight,
                 "further loss weight of the latent cells where the shapes differ")
      ->default_val(o.dit_outline_weight);
  app.add_option("--dit-shape-contrast", f.dit_shape_contrast,
                 "weight of the low-noise expert's shape-word contrast (0: none)")
      ->default_val(o.dit_shape_contrast);
  app.add_option("--dit-shape-margin", f.dit_shape_margin,
                 "relative error margin of the shape-word contrast")
      ->default_val(o.dit_shape_margin);
  app.add_option("--experts-from", f.experts_from,
                 "start the text encoder and experts (--unified: reasoner and generator) from "
                 "MODEL_DIR's (same sizes and tokenizer)");
  app.add_option("--z-dim", f.sizes.z_dim)->default_val(o.sizes.z_dim);
  app.add_option("--vae-spatial", f.sizes.vae_spatial, "pixels per latent cell: 4 or 8")
      ->default_val(o.sizes.vae_spatial);
  app.add_option("--vae-temporal", f.sizes.vae_temporal,
                 "video frames per latent frame after the first: 4 or 2")
      ->default_val(o.sizes.vae_temporal);
  app.add_option("--dit-patch", f.sizes.dit_patch, "latent cells per token side")
      ->default_val(o.sizes.dit_patch);
  app.add_option("--tokenizer", f.tokenizer_type, "SentencePiece model type: word or unigram")
      ->default_val(o.tokenizer_type);
  app.add_option("--dataset-clips", f.dataset_clips)->default_val(o.dataset_clips);
  app.add_option("--dit-steps", f.dit_steps)->default_val(o.dit_steps);
  app.add_option("--dit-batch", f.dit_batch)->default_val(o.dit_batch);
  app.add_option("--dit-lr", f.dit_lr)->default_val(o.dit_lr);
  app.add_option("--dit-layers", f.sizes.dit_layers)->default_val(o.sizes.dit_layers);
  app.add_option("--full-padding", f.full_padding)->default_val(o.full_padding);
  app.add_option("--vae-base-dim", f.sizes.vae_base_dim)->default_val(o.sizes.vae_base_dim);
  app.add_option("--checkpoint-every", f.checkpoint_every)->default_val(o.checkpoint_every);
  app.add_option("--log-every", f.log_every)->default_val(o.log_every);
  CLI11_PARSE(app, argc, argv);

  omni::train::TrainOptions options = smoke ? omni::train::TrainOptions::smoke() : o;
  // Explicit flags win over the recipe.
  const auto given = [&](const char* name) { return app.count(name) > 0; };
  if (given("--seed")) options.seed = f.seed;
  if (given("--threads")) options.threads = f.threads;
  if (given("--vae-steps")) options.vae_steps = f.vae_steps;
  if (given("--vae-batch")) options.vae_batch = f.vae_batch;
  if (given("--vae-crop")) options.vae_crop = f.vae_crop;
  if (given("--vae-lr")) options.vae_lr = f.vae_lr;
  if (given("--vae-from")) options.vae_from = f.vae_from;
  if (given("--vae-full-steps")) options.vae_full_steps = f.vae_full_steps;
  if (given("--vae-colour-jitter")) options.vae_colour_jitter = f.vae_colour_jitter;
  if (given("--dit-object-weight")) options.dit_object_weight = f.dit_object_weight;
  if (given("--dit-outline-weight")) options.dit_outline_weight = f.dit_outline_weight;
  if (given("--dit-shape-contrast")) options.dit_shape_contrast = f.dit_shape_contrast;
  if (given("--dit-shape-margin")) options.dit_shape_margin = f.dit_shape_margin;
  if (given("--experts-from")) options.experts_from = f.experts_from;
  if (given("--z-dim")) options.sizes.z_dim = f.sizes.z_dim;
  if (given("--vae-spatial")) options.sizes.vae_spatial = f.sizes.vae_spatial;
  if (given("--vae-temporal")) options.sizes.vae_temporal = f.sizes.vae_temporal;
  if (given("--dit-patch")) options.sizes.dit_patch = f.sizes.dit_patch;
  if (given("--tokenizer")) options.tokenizer_type = f.tokenizer_type;
  if (given("--dataset-clips")) options.dataset_clips = f.dataset_clips;
  if (given("--dit-steps")) options.dit_steps = f.dit_steps;
  if (given("--dit-batch")) options.dit_batch = f.dit_batch;
  if (given("--dit-lr")) options.dit_lr = f.dit_lr;
  if (given("--dit-layers")) options.sizes.dit_layers = f.sizes.dit_layers;
  if (given("--full-padding")) options.full_padding = f.full_padding;
  if (given("--vae-base-dim")) options.sizes.vae_base_dim = f.sizes.vae_base_dim;
  if (given("--checkpoint-every")) options.checkpoint_every = f.checkpoint_every;
  if (given("--log-every")) options.log_every = f.log_every;
  try {
    options.validate();
    if (unified && options.vae_from.empty())
      throw std::invalid_argument("--unified needs --vae-from DIR (a trained tiny-shapes model)");
  } catch (const std::exception& e) {
    std::cerr << "omni-train: " << e.what() << "\n";
    return 2;
  }
  try {
    if (unified)
      omni::train::train_tiny_shapes_unified(options, out_dir, std::cout);
    else
      omni::train::train_tiny_shapes(options, out_dir, std::cout);
  } catch (const std::exception& e) {
    std::cerr << "omni-train: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
