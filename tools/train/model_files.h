// The files of models/tiny-shapes: component configs (the sizes the trainer
// builds), the SentencePiece tokenizer trained on the prompt grammar, and the
// diffusers directory layout that WanPipeline::load reads.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "omni/models/wan/autoencoder_kl_wan.h"
#include "omni/models/wan/umt5_encoder.h"
#include "omni/models/wan/wan_transformer.h"

namespace omni::train {

// Sizes of the tiny model; every other config field is fixed by
// component_configs(). The defaults are what models/tiny-shapes ships.
struct ModelSizes {
  std::int64_t vae_base_dim = 12;
  std::int64_t z_dim = 8;
  // Pixels per latent cell along each side: 8 (Wan's 4 levels) or 4 (one
  // level fewer).
  std::int64_t vae_spatial = 4;
  // Video frames per latent frame after the first: 4 (Wan's) or 2 (only the
  // last downsampling level halves time; Note [Frames per latent frame] in
  // shapes.cpp).
  std::int64_t vae_temporal = 4;
  // Latent cells per transformer token along each side (patch_size (1, p, p)).
  std::int64_t dit_patch = 2;
  std::int64_t dit_heads = 4;
  std::int64_t dit_head_dim = 32;
  std::int64_t dit_layers = 3;
  std::int64_t dit_ffn = 256;
  std::int64_t text_dim = 64;  // UMT5 d_model
  std::int64_t text_layers = 2;
  std::int64_t vocab_size = 128;  // embedding rows; the tokenizer has at most this many pieces
};

// The scheduler and expert switch the model is trained for and ships with.
inline constexpr double kFlowShift = 3.0;
inline constexpr double kBoundaryRatio = 0.875;
inline constexpr int kNumTrainTimesteps = 1000;

// config.json of each component, exactly as written to the directory.
struct ComponentConfigs {
  nlohmann::json text_encoder;
  nlohmann::json transformer;  // both experts share it
  nlohmann::json vae;          // latents_mean/std filled in after the VAE is trained
  nlohmann::json scheduler;
  nlohmann::json model_index;
  // omni_defaults.json: the clip size the model was trained on, so a request
  // that gives none draws what the model knows.
  nlohmann::json request_defaults;
};
ComponentConfigs component_configs(const ModelSizes& sizes);

// Trains tokenizer/spiece.model in `dir` with `spm_train` on `sentences`,
// with T5's special ids (pad 0, eos 1, unk 2, no bos); `model_type` is
// spm_train's ("unigram", "word", …). std::runtime_error naming the log file
// when spm_train fails or is missing.
std::filesystem::path train_tokenizer(const std::filesystem::path& dir,
                                      const std::vector<std::string>& sentences, int vocab_size,
                                      const std::string& model_type);

// The trained components, as the directory stores them.
struct TrainedModel {
  models::wan::UMT5EncoderModel text_encoder{nullptr};
  models::wan::WanTransformer3DModel transformer{nullptr};
  models::wan::WanTransformer3DModel transformer_2{nullptr};
  models::wan::AutoencoderKLWan vae{nullptr};
};

// Writes model_index.json, scheduler/, text_encoder/, transformer/,
// transformer_2/ and vae/ (float32 safetensors) and omni_defaults.json into `dir`; the tokenizer
// folder is written by train_tokenizer beforehand.
void write_model_dir(const std::filesystem::path& dir, const ComponentConfigs& configs,
                     const TrainedModel& model);

}  // namespace omni::train
