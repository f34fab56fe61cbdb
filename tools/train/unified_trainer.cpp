// The unified split model of models/tiny-shapes-unified (unified_trainer.h).
#include "unified_trainer.h"

#include <torch/torch.h>

#include <algorithm>
#include <iomanip>
#include <random>
#include <stdexcept>

#include "omni/io/checkpoint.h"
#include "omni/io/tokenizer.h"
#include "omni/models/unified/omni_unified_transformer.h"
#include "omni/pipelines/wan_video_stages.h"
#include "training_parts.h"

namespace fs = std::filesystem;

namespace omni::train {

namespace {

using namespace parts;
using models::unified::OmniUnifiedTransformer;
using models::unified::OmniUnifiedTransformerConfig;
using models::unified::OmniUnifiedTransformerImpl;

// Note [Training the unified model]
// The expert phase of Note [Training the experts] (trainer.cpp) with one
// generator for every noise level: each step draws dit_batch encoded clips
// with σ from the whole shifted schedule (u uniform on [0, 1)), the
// reasoner reads their prompts (prompt_dropout of them replaced by ""),
// tokenized as the pipeline tokenizes them, to max_tokens — the exact
// context the pipeline gives the generator, so no padding mix is needed
// (full_padding is not used) — and the generator predicts the velocity
// ε − x₀ from it. Reasoner and generator share one AdamW, the learning-rate
// schedule and one loss, so the reasoner learns what the generator needs;
// the saved weights are the EMA of both.
//
// experts_from starts reasoner and generator from a trained unified model's
// (same config, tokenizer encoding the grammar alike); dit_shape_contrast
// adds Note [Contrasting the shape word] (trainer.cpp) on the clips whose σ
// is below the two-expert recipe's boundary, where the two-expert recipe
// applies it to its low-noise expert: those clips are predicted again with
// another shape's word, read by the reasoner like any prompt.
using UnifiedCheckpointFn = std::function<void(const OmniUnifiedTransformer&)>;

// TrainOptions::experts_from for the unified model: `dir`'s transformer
// into `model`; std::runtime_error when its config is not `config_json` or
// its tokenizer is not `tokenizer`.
void load_trained_unified(const fs::path& dir, const nlohmann::json& config_json,
                          const io::Tokenizer& tokenizer, OmniUnifiedTransformer& model,
                          std::ostream& log) {
  check_same_config(dir / "transformer" / "config.json", config_json);
  check_same_tokenizer(dir, tokenizer);
  model->load_weights(io::Checkpoint::open_dir(dir / "transformer", "diffusion_pytorch_model"));
  log << "unified reasoner and generator start from " << dir.string() << std::endl;
}

OmniUnifiedTransformer train_unified_model(const TrainOptions& o, const nlohmann::json& config_json,
                                           const io::Tokenizer& tokenizer, const LatentSet& data,
                                           std::mt19937_64& rng, std::ostream& log,
                                           const UnifiedCheckpointFn& checkpoint) {
  const auto config =
      OmniUnifiedTransformerConfig::from_json(config_json, "unified transformer config");
  OmniUnifiedTransformer model(config);
  initialise(*model->reasoner);
  initialise(*model->generator);
  if (!o.experts_from.empty())
    load_trained_unified(o.experts_from, config_json, tokenizer, model, log);
  const auto params = model->parameters();
  EmaWeights ema(params);
  torch::optim::AdamW optimizer(
      params, torch::optim::AdamWOptions(o.dit_lr).betas({0.9, 0.99}).weight_decay(0.01));

  const auto longest = longest_prompt_tokens(tokenizer, data.prompts);
  if (longest > config.max_tokens)
    throw std::runtime_error("a training prompt has " + std::to_string(longest) +
                             " tokens, more than the reasoner's max_tokens " +
                             std::to_string(config.max_tokens));
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const auto start = Clock::now();
  double running = 0, running_contrast = 0;
  int running_n = 0;
  // As in train_experts: its own generator, so a run without the contrast
  // draws what it drew before the contrast existed.
  std::mt19937_64 contrast_rng(o.seed + 3);
  for (int step = 0; step < o.dit_steps; ++step) {
    set_lr(optimizer, scheduled_lr(o.dit_lr, step, o.dit_steps));
    std::vector<std::int64_t> index;
    std::vector<std::string> prompts;
    std::vector<float> sigmas;
    for (int i = 0; i < o.dit_batch; ++i) {
      auto example = draw_example(rng, data, o.prompt_dropout);
      index.push_back(example.index);
      prompts.push_back(std::move(example.prompt));
      sigmas.push_back(static_cast<float>(shifted_sigma(unit(rng))));
    }
    const auto read = [&](const std::vector<std::string>& texts) {
      const auto tokens = pipelines::tokenize_prompts(tokenizer, texts, config.max_tokens);
      return model->reasoner(tokens.input_ids, tokens.attention_mask);
    };
    const auto [noisy, target, timestep, weight] =
        flow_matching_batch(data, index, sigmas, o.dit_object_weight, o.dit_outline_weight);
    const auto prediction = model->generator(noisy, timestep, read(prompts));
    const auto mse = weighted_mse(prediction, target, weight);
    auto loss = mse;
    if (o.dit_shape_contrast > 0) {
      std::vector<bool> low_noise;
      for (const float sigma : sigmas) low_noise.push_back(sigma < kBoundaryRatio);
      const auto contrast = shape_word_contrast(
          data, index, prompts, low_noise, prediction, target, o.dit_shape_margin, contrast_rng,
          [&](const torch::Tensor& rows, const auto& others) {
            return model->generator(noisy.index_select(0, rows), timestep.index_select(0, rows),
                                    read(others));
          });
      if (contrast.defined()) {
        loss = loss + o.dit_shape_contrast * contrast;
        running_contrast += contrast.item<double>();
      }
    }
    optimizer_step(optimizer, loss, params);
    ema.update(step, o.ema_decay);
    running += mse.item<double>();
    ++running_n;
    if ((step + 1) % o.log_every == 0 || step + 1 == o.dit_steps) {
      log << "unified step " << std::setw(5) << step + 1 << "/" << o.dit_steps << "  loss "
          << std::fixed << std::setprecision(4) << running / running_n;
      if (o.dit_shape_contrast > 0) log << "  contrast " << running_contrast / running_n;
      log << "  " << elapsed_and_eta(start, step + 1, o.dit_steps) << std::endl;
      log.unsetf(std::ios::fixed);
      running = running_contrast = 0;
      running_n = 0;
    }
    if (checkpoint && checkpoint_due(o, step)) ema.with_average([&] { checkpoint(model); });
  }
  ema.install();
  return model;
}

nlohmann::json unified_model_index() {
  return {{"_class_name", "OmniUnifiedPipeline"},
          {"_diffusers_version", "0.35.0"},
          {"scheduler", {"diffusers", "FlowMatchEulerDiscreteScheduler"}},
          {"tokenizer", {"transformers", "T5TokenizerFast"}},
          {"transformer", {"omni", "OmniUnifiedTransformer"}},
          {"vae", {"diffusers", "AutoencoderKLWan"}}};
}

// vae_from's tokenizer/ (spiece.model and tokenizer_config.json) into `dir`/tokenizer.
fs::path copy_tokenizer(const fs::path& from_model, const fs::path& dir) {
  const auto source = from_model / "tokenizer";
  if (!fs::is_regular_file(source / "spiece.model"))
    throw std::runtime_error((source / "spiece.model").string() +
                             " is missing: --vae-from needs a trained tiny-shapes directory");
  fs::create_directories(dir / "tokenizer");
  for (const char* file : {"spiece.model", "tokenizer_config.json"})
    if (fs::is_regular_file(source / file))
      fs::copy_file(source / file, dir / "tokenizer" / file, fs::copy_options::overwrite_existing);
  return dir / "tokenizer" / "spiece.model";
}

}  // namespace

nlohmann::json unified_transformer_config(const ModelSizes& s) {
  return {
      {"_class_name", "OmniUnifiedTransformer"}, {"vocab_size", s.vocab_size},
      {"max_tokens", kUnifiedMaxTokens},         {"reasoner_dim", s.text_dim},
      {"reasoner_layers", s.text_layers},        {"reasoner_heads", s.text_dim / 16},
      {"reasoner_ffn", 4 * s.text_dim},          {"generator", component_configs(s).transformer}};
}

void train_tiny_shapes_unified(const TrainOptions& o, const fs::path& out_dir, std::ostream& log) {
  if (o.vae_from.empty())
    throw std::invalid_argument(
        "vae_from is required: the unified model reuses a trained tiny-shapes model's vae/ and "
        "tokenizer/ (--vae-from DIR)");
  const auto transformer_json = unified_transformer_config(o.sizes);
  const auto config =
      OmniUnifiedTransformerConfig::from_json(transformer_json, "unified transformer config");
  auto run = begin_run(o, out_dir);
  auto& configs = run.configs;

  const auto tokenizer = io::Tokenizer::from_file(copy_tokenizer(o.vae_from, out_dir));
  if (tokenizer.vocab_size() > config.vocab_size)
    throw std::runtime_error("the tokenizer has more pieces than the reasoner embeds");
  log << "tokenizer: " << tokenizer.vocab_size() << " pieces (from " << o.vae_from.string() << ")"
      << std::endl;

  // The same seeded phases as train_tiny_shapes with vae_from: the same data.
  auto [vae, data] = prepare_training_data(o, configs, run.rng, log);
  const auto write = [&](const OmniUnifiedTransformer& model) {
    write_json(out_dir / "transformer" / "config.json", transformer_json);
    save_float32(*model, out_dir / "transformer" / "diffusion_pytorch_model.safetensors",
                 OmniUnifiedTransformerImpl::non_persistent_buffers());
    write_json(out_dir / "vae" / "config.json", configs.vae);
    save_float32(*vae, out_dir / "vae" / "diffusion_pytorch_model.safetensors");
    write_json(out_dir / "scheduler" / "scheduler_config.json", configs.scheduler);
    write_json(out_dir / "omni_defaults.json", configs.request_defaults);
    write_json(out_dir / "model_index.json", unified_model_index());
  };
  const auto model =
      train_unified_model(o, transformer_json, tokenizer, data, run.rng, log, [&](const auto& m) {
        write(m);
        log << "checkpoint written to " << out_dir.string() << std::endl;
      });
  write(model);
  log_written(log, out_dir, run.start);
}

}  // namespace omni::train
