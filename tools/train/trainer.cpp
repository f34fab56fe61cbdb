// The three training phases of models/tiny-shapes (trainer.h).
#include "trainer.h"

#include <torch/torch.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <iomanip>
#include <map>
#include <random>
#include <sstream>
#include <stdexcept>

#include "omni/device/cpu_threads.h"
#include "omni/io/checkpoint.h"
#include "omni/io/json_config.h"
#include "omni/io/tokenizer.h"
#include "shapes.h"
#include "training_parts.h"

namespace fs = std::filesystem;

namespace omni::train {

namespace {

using models::wan::AutoencoderKLWan;
using models::wan::AutoencoderKLWanConfig;
using models::wan::UMT5Config;
using models::wan::UMT5EncoderModel;
using models::wan::WanTransformer3DConfig;
using models::wan::WanTransformer3DModel;
using namespace parts;

// Note [Prompt length in training]
// WanPipeline encodes every prompt padded to 512 tokens (diffusers'
// max_sequence_length) and zeroes the embeddings past the prompt, so at
// inference each expert cross-attends to ~500 identical zero embeddings as
// well as the prompt's ~12 tokens. The text encoder masks padded keys, so its
// outputs for the real tokens do not depend on the padding: encoding a short
// batch and appending zeros is exact. The experts, though, see the number of
// pads (N identical keys weigh as one key with logit + log N), and on these
// two CPU cores a 512-token context makes an expert step ~10× dearer than a
// 16-token one. So most steps pad to the longest prompt only, and a fraction
// (full_padding) pad to the full 512: the experts learn to be independent of
// the padding, and the inference context is one they were trained on.
constexpr std::int64_t kInferenceSequenceLength = 512;

// A batch of drawn training clips [B, 3, F, H, W] and the weight of each
// pixel in the reconstruction loss: 1 on the background, 9 on and around the
// shape (it covers a tenth of the frame but carries every attribute).
struct ClipBatch {
  torch::Tensor video;
  torch::Tensor weight;
  std::vector<std::string> prompts;
  std::vector<ShapeClip> clips;  // as drawn, before any window or crop
};

// [1, F, H, W]: 1 where the drawn `video` of `clip` is not its background.
torch::Tensor object_pixels(const torch::Tensor& video, const ShapeClip& clip) {
  const auto bg = clip.background_rgb.value_or(rgb_of(clip.spec.background));
  const auto bg_t = torch::tensor({bg[0] / 127.5 - 1.0, bg[1] / 127.5 - 1.0, bg[2] / 127.5 - 1.0},
                                  torch::kFloat32)
                        .view({3, 1, 1, 1});
  return ((video - bg_t).abs().sum(0, true) > 0.05).to(torch::kFloat32);
}

// frames: a random window of that many frames of each clip (0: all).
// crop: a crop²-pixel window (0: the whole frame) around the shape's
// centroid in the window's middle frame, shifted by up to a quarter crop and
// kept inside the frame: a shape covers a tenth of the frame, and random
// windows would mostly show background.
// colour_jitter: the probability that a clip is drawn in random colours
// (Note [Colour jitter for the VAE]); its prompt is then meaningless.
ClipBatch draw_batch(std::mt19937_64& rng, int batch, int crop = 0, int frames = 0,
                     double colour_jitter = 0.0) {
  std::vector<torch::Tensor> videos, weights;
  ClipBatch out;
  for (int i = 0; i < batch; ++i) {
    auto clip = sample_clip(rng, Split::kTrain);
    if (colour_jitter > 0 && std::uniform_real_distribution<double>(0.0, 1.0)(rng) < colour_jitter)
      parts::jitter_colours(rng, clip);
    auto video = draw_clip(clip);
    auto object = object_pixels(video, clip);
    if (frames > 0 && frames < video.size(1)) {
      const auto start =
          std::uniform_int_distribution<std::int64_t>(0, video.size(1) - frames)(rng);
      video = video.narrow(1, start, frames);
      object = object.narrow(1, start, frames);
    }
    if (crop > 0 && crop < video.size(2)) {
      const auto middle = object[0][video.size(1) / 2];
      const auto cells = middle.nonzero().to(torch::kFloat64);
      std::int64_t starts[2];
      for (int axis = 0; axis < 2; ++axis) {
        const auto full = video.size(2 + axis);
        const double centre =
            cells.size(0) > 0 ? cells.select(1, axis).mean().item<double>() : full / 2.0;
        const double jitter = std::uniform_real_distribution<double>(-crop / 4.0, crop / 4.0)(rng);
        starts[axis] =
            std::clamp<std::int64_t>(std::llround(centre + jitter - crop / 2.0), 0, full - crop);
      }
      video = video.narrow(2, starts[0], crop).narrow(3, starts[1], crop);
      object = object.narrow(2, starts[0], crop).narrow(3, starts[1], crop);
    }
    video = video.contiguous();
    // Dilate by one pixel so the shape's edge counts as the shape.
    const auto grown =
        torch::max_pool3d(object.unsqueeze(0), {1, 3, 3}, {1, 1, 1}, {0, 1, 1}).squeeze(0);
    weights.push_back(1.0 + 8.0 * grown);
    videos.push_back(std::move(video));
    out.prompts.push_back(prompt_of(clip.spec));
    out.clips.push_back(clip);
  }
  out.video = torch::stack(videos);
  out.weight = torch::stack(weights);
  return out;
}

AutoencoderKLWan train_vae(const TrainOptions& o, const ComponentConfigs& configs,
                           std::mt19937_64& rng, std::ostream& log) {
  AutoencoderKLWan vae(AutoencoderKLWanConfig::from_json(configs.vae, "vae config"));
  initialise(*vae);
  vae->train();
  torch::optim::AdamW optimizer(
      vae->parameters(), torch::optim::AdamWOptions(o.vae_lr).betas({0.9, 0.99}).weight_decay(0.0));
  const auto start = Clock::now();
  double running_rec = 0, running_mean_sq = 0;
  int running_n = 0;
  for (int step = 0; step < o.vae_steps; ++step) {
    set_lr(optimizer, scheduled_lr(o.vae_lr, step, o.vae_steps));
    // The last vae_full_steps see whole frames (half the batch): crops never
    // show the frame's border, and without them the decoder drew rings there.
    const bool full_frames = step >= o.vae_steps - o.vae_full_steps;
    const auto batch =
        full_frames
            ? draw_batch(rng, std::max(1, o.vae_batch / 2), 0, o.vae_frames, o.vae_colour_jitter)
            : draw_batch(rng, o.vae_batch, o.vae_crop, o.vae_frames, o.vae_colour_jitter);
    const auto posterior = vae->encode(batch.video);
    // Note [A nearly deterministic VAE]
    // Sampling the posterior from its initial unit variance drowned the
    // latents in noise: after 1500 steps the decoder still drew average
    // colours (reconstructed shape 42%, colour 38%). The experts learn the
    // posterior means (encode_dataset), so the decoder is trained on the mean
    // plus a little noise (latent_noise of the batch's latent spread), which
    // keeps it tolerant of the experts' small errors, and kl_weight · mean²
    // keeps the latents' scale in check. logvar is not trained.
    const auto mean = posterior.mean;
    const auto z = mean + o.latent_noise * mean.detach().std() * torch::randn_like(mean);
    const auto decoded = vae->decode(z);
    const auto diff = decoded - batch.video;
    const auto rec = (batch.weight * (diff.pow(2) + 0.1 * diff.abs())).mean();
    const auto mean_sq = 0.5 * mean.pow(2).mean();
    const auto loss = rec + o.kl_weight * mean_sq;
    optimizer.zero_grad();
    loss.backward();
    torch::nn::utils::clip_grad_norm_(vae->parameters(), 1.0);
    optimizer.step();
    running_rec += rec.item<double>();
    running_mean_sq += mean_sq.item<double>();
    ++running_n;
    if ((step + 1) % o.log_every == 0 || step + 1 == o.vae_steps) {
      const double elapsed = seconds_since(start);
      log << "vae  step " << std::setw(5) << step + 1 << "/" << o.vae_steps << "  rec "
          << std::fixed << std::setprecision(5) << running_rec / running_n << "  mean² "
          << std::setprecision(3) << running_mean_sq / running_n << "  " << std::setprecision(0)
          << elapsed << " s (eta " << elapsed / (step + 1) * (o.vae_steps - step - 1) << " s)"
          << std::endl;
      log.unsetf(std::ios::fixed);
      running_rec = running_mean_sq = 0;
      running_n = 0;
    }
  }
  vae->eval();
  return vae;
}

}  // namespace

namespace parts {

// Note [Colour jitter for the VAE]
// The VAE trained on the palette alone learnt colours together with the
// backgrounds they appear on: red on gray, held out of its training, came
// back green or yellow (reconstructed foreground 79% on held-out prompts,
// 100% on seen ones). The VAE is a pixel codec and reads no prompt, so a
// share of its clips (vae_colour_jitter) is drawn in random colours on random
// backgrounds: it then has to carry any colour on any background. The
// held-out rule still holds: a jittered clip whose colours are nearest to a
// held-out combination (red on something nearest gray, a green-ish triangle,
// ...) is drawn again, so the palette combinations the quality test calls
// held out stay unseen by every component.
void jitter_colours(std::mt19937_64& rng, ShapeClip& clip) {
  std::uniform_int_distribution<int> channel(0, 255);
  for (;;) {
    const std::array<int, 3> fg{channel(rng), channel(rng), channel(rng)};
    const std::array<int, 3> bg{channel(rng), channel(rng), channel(rng)};
    int d2 = 0;
    for (int c = 0; c < 3; ++c) d2 += (fg[c] - bg[c]) * (fg[c] - bg[c]);
    if (d2 < 80 * 80) continue;  // too faint to be a shape
    auto named = clip.spec;
    named.foreground = nearest_colour(fg);
    named.background = nearest_colour(bg);
    if (is_held_out(named)) continue;
    clip.foreground_rgb = fg;
    clip.background_rgb = bg;
    return;
  }
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Note [Initialisation]
// The models' constructors leave weights zero (VAE) or at LibTorch defaults;
// training starts from: biases 0; norm scales 1; embeddings N(0, 1); other
// matrices and kernels N(0, 1/fan_in), T5's query projections a further
// 1/√d_kv (T5 does not scale its attention logits); the experts' output
// projection 0 (so each starts by predicting zero velocity); the experts'
// scale_shift_tables as constructed (N(0, 1/dim), from the seeded generator).
void initialise(torch::nn::Module& module, double query_scale) {
  torch::NoGradGuard no_grad;
  for (auto& item : module.named_parameters()) {
    auto& p = item.value();
    const auto& name = item.key();
    if (name.find("scale_shift_table") != std::string::npos) continue;
    if (name.ends_with("bias") || name.starts_with("proj_out.")) {
      p.zero_();
    } else if (name.ends_with("gamma") || p.dim() == 1) {
      p.fill_(1.0);
    } else if (name == "shared.weight" || name.ends_with("embed_tokens.weight")) {
      p.normal_(0.0, 1.0);
    } else {
      const double fan_in = static_cast<double>(p.numel() / p.size(0));
      double std = 1.0 / std::sqrt(fan_in);
      if (name.ends_with(".q.weight")) std *= query_scale;
      p.normal_(0.0, std);
    }
  }
}

void set_lr(torch::optim::AdamW& optimizer, double lr) {
  for (auto& group : optimizer.param_groups())
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
}

// Linear warm-up, then cosine decay to 10% of the peak.
double scheduled_lr(double peak, int step, int total) {
  const int warmup = std::min(100, std::max(1, total / 10));
  if (step < warmup) return peak * (step + 1) / warmup;
  const double progress = static_cast<double>(step - warmup) / std::max(1, total - warmup);
  return peak * (0.1 + 0.9 * 0.5 * (1.0 + std::cos(M_PI * progress)));
}

AutoencoderKLWan load_trained_vae(const fs::path& model_dir, const ComponentConfigs& configs,
                                  std::ostream& log) {
  const auto folder = model_dir / "vae";
  auto stored = io::read_json_file(folder / "config.json");
  auto wanted = configs.vae;
  for (auto* config : {&stored, &wanted}) {
    config->erase("latents_mean");
    config->erase("latents_std");
  }
  if (stored != wanted)
    throw std::runtime_error((folder / "config.json").string() +
                             " is not this recipe's VAE (sizes differ): train it again");
  AutoencoderKLWan vae(AutoencoderKLWanConfig::from_json(configs.vae, "vae config"));
  io::load_state_dict(*vae, io::Checkpoint::open_dir(folder, "diffusion_pytorch_model"));
  vae->eval();
  log << "vae  loaded from " << folder.string() << std::endl;
  return vae;
}

LatentSet encode_dataset(const TrainOptions& o, AutoencoderKLWan& vae, ComponentConfigs& configs,
                         std::mt19937_64& rng, std::ostream& log) {
  torch::NoGradGuard no_grad;
  const auto start = Clock::now();
  std::vector<torch::Tensor> chunks, objects, outlines;
  LatentSet set;
  constexpr int kChunk = 8;
  for (int done = 0; done < o.dataset_clips; done += kChunk) {
    const auto batch = draw_batch(rng, std::min(kChunk, o.dataset_clips - done));
    chunks.push_back(vae->encode(batch.video).mean);
    // batch.weight is 1 + 8·(the shape grown by a pixel), so > 1 marks the
    // shape (Note [Weighting the shape]).
    objects.push_back(latent_cells(batch.weight > 1.0, o.sizes.vae_spatial, o.sizes.vae_temporal));
    if (o.dit_outline_weight > 0 || o.dit_shape_contrast > 0) {
      std::vector<torch::Tensor> outline;
      for (const auto& clip : batch.clips) outline.push_back(outline_pixels(clip));
      outlines.push_back(
          latent_cells(torch::stack(outline), o.sizes.vae_spatial, o.sizes.vae_temporal));
    }
    set.prompts.insert(set.prompts.end(), batch.prompts.begin(), batch.prompts.end());
  }
  auto latents = torch::cat(chunks);
  set.object = torch::cat(objects);
  if (!outlines.empty()) set.outline = torch::cat(outlines);
  const auto mean = latents.mean({0, 2, 3, 4});
  const auto std = latents.std({0, 2, 3, 4}).clamp_min(1e-3);
  std::vector<double> mean_v, std_v;
  for (std::int64_t c = 0; c < mean.size(0); ++c) {
    // Stored as float32 would round them; the pipeline reads the JSON values.
    mean_v.push_back(static_cast<double>(mean[c].item<float>()));
    std_v.push_back(static_cast<double>(std[c].item<float>()));
  }
  configs.vae["latents_mean"] = mean_v;
  configs.vae["latents_std"] = std_v;
  const auto shape = std::vector<std::int64_t>{1, mean.size(0), 1, 1, 1};
  set.latents = ((latents - mean.view(shape)) / std.view(shape)).contiguous();
  log << "data " << o.dataset_clips << " clips encoded to " << set.latents.sizes() << " in "
      << std::fixed << std::setprecision(0) << seconds_since(start) << " s" << std::endl;
  log.unsetf(std::ios::fixed);
  return set;
}

double shifted_sigma(double u) {
  return kFlowShift * u / (1.0 + (kFlowShift - 1.0) * u);
}
double unshifted(double sigma) {
  return sigma / (kFlowShift - (kFlowShift - 1.0) * sigma);
}

Example draw_example(std::mt19937_64& rng, const LatentSet& data, double prompt_dropout) {
  Example e;
  e.index = std::uniform_int_distribution<std::int64_t>(0, data.latents.size(0) - 1)(rng);
  const bool dropped = std::uniform_real_distribution<double>(0.0, 1.0)(rng) < prompt_dropout;
  e.prompt = dropped ? std::string() : data.prompts[static_cast<std::size_t>(e.index)];
  return e;
}

torch::Tensor latent_cells(const torch::Tensor& mask, std::int64_t spatial, std::int64_t temporal) {
  const auto m = mask.to(torch::kFloat32);
  TORCH_CHECK(temporal >= 1 && m.dim() == 5 && (m.size(2) - 1) % temporal == 0,
              "latent_cells: a [B, 1, 1 + ", temporal, "k, H, W] mask, got ", m.sizes());
  // Frame 0 repeated to a whole window, then every window pooled.
  const auto padded = torch::cat({m.narrow(2, 0, 1).expand({-1, -1, temporal - 1, -1, -1}), m}, 2);
  return torch::max_pool3d(padded, {temporal, spatial, spatial}, {temporal, spatial, spatial});
}

torch::Tensor shape_pixels(const ShapeClip& clip) {
  return object_pixels(draw_clip(clip), clip);
}

torch::Tensor outline_pixels(const ShapeClip& clip) {
  const auto own = shape_pixels(clip);
  auto differ = torch::zeros_like(own);
  for (const auto shape : kShapes) {
    if (shape == clip.spec.shape) continue;
    auto other = clip;
    other.spec.shape = shape;
    differ = torch::maximum(differ, (shape_pixels(other) != own).to(torch::kFloat32));
  }
  return differ;
}

FlowBatch flow_matching_batch(const LatentSet& data, const std::vector<std::int64_t>& index,
                              const std::vector<float>& sigmas, double object_weight,
                              double outline_weight) {
  const auto rows = torch::tensor(index, torch::kInt64);
  const auto x0 = data.latents.index_select(0, rows);
  const auto sigma = torch::tensor(sigmas, torch::kFloat32);
  const auto s = sigma.view({-1, 1, 1, 1, 1});
  const auto noise = torch::randn_like(x0);
  auto weight = 1.0 + object_weight * data.object.index_select(0, rows);
  if (outline_weight != 0) weight = weight + outline_weight * data.outline.index_select(0, rows);
  return {(1.0 - s) * x0 + s * noise, noise - x0, sigma * static_cast<double>(kNumTrainTimesteps),
          weight};
}

torch::Tensor weighted_mse(const torch::Tensor& prediction, const torch::Tensor& target,
                           const torch::Tensor& weight) {
  // mean over [B, C, ...] of w·d² divided by the mean of w over [B, 1, ...].
  return (weight * (prediction - target).pow(2)).mean() / weight.mean();
}

std::string other_shape_prompt(const std::string& prompt, std::mt19937_64& rng) {
  static const auto specs = [] {
    std::map<std::string, ShapeSpec> by_prompt;
    for (const auto& spec : all_specs()) by_prompt.emplace(prompt_of(spec), spec);
    return by_prompt;
  }();
  const auto found = specs.find(prompt);
  if (found == specs.end()) return {};
  std::vector<ShapeSpec> others;
  for (const auto shape : kShapes) {
    auto other = found->second;
    other.shape = shape;
    if (shape != found->second.shape && !is_held_out(other)) others.push_back(other);
  }
  if (others.empty()) return {};
  std::uniform_int_distribution<std::size_t> pick(0, others.size() - 1);
  return prompt_of(others[pick(rng)]);
}

torch::Tensor shape_contrast(const torch::Tensor& right, const torch::Tensor& swapped,
                             const torch::Tensor& target, const torch::Tensor& mask,
                             double margin) {
  const std::vector<std::int64_t> cells = {1, 2, 3, 4};
  const auto count = (mask.sum(cells) * right.size(1)).clamp_min(1.0);
  const auto error = [&](const torch::Tensor& p) {
    return (mask * (p - target).pow(2)).sum(cells) / count;
  };
  return torch::relu((1.0 + margin) * error(right) - error(swapped)).mean();
}

torch::Tensor shape_word_contrast(const LatentSet& data, const std::vector<std::int64_t>& clips,
                                  const std::vector<std::string>& prompts,
                                  const std::vector<bool>& eligible,
                                  const torch::Tensor& prediction, const torch::Tensor& target,
                                  double margin, std::mt19937_64& rng,
                                  const PredictAgainFn& predict_again) {
  std::vector<std::int64_t> rows, their_clips;
  std::vector<std::string> others;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    if (!eligible[i]) continue;
    auto other = other_shape_prompt(prompts[i], rng);
    if (other.empty()) continue;
    rows.push_back(static_cast<std::int64_t>(i));
    their_clips.push_back(clips[i]);
    others.push_back(std::move(other));
  }
  if (rows.empty()) return {};
  const auto r = torch::tensor(rows, torch::kInt64);
  const auto c = torch::tensor(their_clips, torch::kInt64);
  const auto swapped = predict_again(r, others);
  const auto mask =
      (data.object.index_select(0, c) + data.outline.index_select(0, c)).clamp_max(1.0);
  return shape_contrast(prediction.index_select(0, r), swapped, target.index_select(0, r), mask,
                        margin);
}

void check_same_config(const fs::path& config_file, const nlohmann::json& wanted) {
  if (io::read_json_file(config_file) != wanted)
    throw std::runtime_error(config_file.string() +
                             " is not this run's config (sizes differ): --experts-from needs a "
                             "model trained with the same sizes");
}

void check_same_tokenizer(const fs::path& model_dir, const io::Tokenizer& tokenizer) {
  // The model file records where spm_train read its input, so compare what
  // the two tokenizers do, not their bytes.
  const auto theirs = model_dir / "tokenizer" / "spiece.model";
  const auto other = io::Tokenizer::from_file(theirs);
  for (const auto& spec : all_specs())
    if (other.encode(prompt_of(spec)) != tokenizer.encode(prompt_of(spec)))
      throw std::runtime_error(theirs.string() + " tokenizes \"" + prompt_of(spec) +
                               "\" differently from this run's: --experts-from needs the same "
                               "tokenizer");
}

std::int64_t longest_prompt_tokens(const io::Tokenizer& tokenizer,
                                   const std::vector<std::string>& prompts) {
  std::int64_t length = 2;
  for (const auto& p : prompts)
    length =
        std::max<std::int64_t>(length, static_cast<std::int64_t>(tokenizer.encode(p).size()) + 1);
  return length;
}

void optimizer_step(torch::optim::AdamW& optimizer, const torch::Tensor& loss,
                    const std::vector<torch::Tensor>& params) {
  optimizer.zero_grad();
  loss.backward();
  torch::nn::utils::clip_grad_norm_(params, 1.0);
  optimizer.step();
}

EmaWeights::EmaWeights(std::vector<torch::Tensor> params) : params_(std::move(params)) {
  for (auto& p : params_) average_.push_back(p.detach().clone());
}

void EmaWeights::update(int step, double decay) {
  torch::NoGradGuard no_grad;
  const double d = std::min(decay, (1.0 + step) / (10.0 + step));
  for (std::size_t i = 0; i < params_.size(); ++i)
    average_[i].mul_(d).add_(params_[i].detach(), 1.0 - d);
}

void EmaWeights::with_average(const std::function<void()>& fn) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> trained;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    trained.push_back(params_[i].detach().clone());
    params_[i].copy_(average_[i]);
  }
  fn();
  for (std::size_t i = 0; i < params_.size(); ++i) params_[i].copy_(trained[i]);
}

void EmaWeights::install() {
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < params_.size(); ++i) params_[i].copy_(average_[i]);
}

std::string elapsed_and_eta(Clock::time_point start, int done, int total) {
  const double elapsed = seconds_since(start);
  std::ostringstream out;
  out << std::fixed << std::setprecision(0) << elapsed << " s (eta "
      << elapsed / done * (total - done) << " s)";
  return out.str();
}

bool checkpoint_due(const TrainOptions& o, int step) {
  return o.checkpoint_every > 0 && (step + 1) % o.checkpoint_every == 0 && step + 1 < o.dit_steps;
}

TrainingRun begin_run(const TrainOptions& o, const fs::path& out_dir) {
  o.validate();
  configure_cpu(o.threads);
  torch::manual_seed(o.seed);
  TrainingRun run{std::mt19937_64(o.seed), Clock::now(), component_configs(o.sizes)};
  fs::create_directories(out_dir);
  return run;
}

TrainingData prepare_training_data(const TrainOptions& o, ComponentConfigs& configs,
                                   std::mt19937_64& rng, std::ostream& log) {
  // Each phase has its own seeded generators, so a run that reuses a trained
  // VAE (vae_from) draws the same data and experts as one that trains it.
  auto vae = o.vae_from.empty() ? train_vae(o, configs, rng, log)
                                : load_trained_vae(o.vae_from, configs, log);
  rng.seed(o.seed + 1);
  torch::manual_seed(o.seed + 1);
  auto data = encode_dataset(o, vae, configs, rng, log);
  rng.seed(o.seed + 2);
  torch::manual_seed(o.seed + 2);
  return {vae, std::move(data)};
}

void log_written(std::ostream& log, const fs::path& out_dir, Clock::time_point start) {
  log << "wrote " << out_dir.string() << " in " << std::fixed << std::setprecision(0)
      << seconds_since(start) << " s" << std::endl;
  log.unsetf(std::ios::fixed);
}

}  // namespace parts

namespace {

// Note [Weighting the shape]
// A shape covers ~7% of the frame and every attribute but the background
// lives there; with a plain MSE the experts drew the right colour in the
// right place as a blob (generated shape 46% right on seen prompts, against
// 92% for the VAE's reconstructions). So the loss weighs each latent cell the
// shape touches (its 4×4-pixel window, grown by a pixel) 1 + dit_object_weight
// times a background cell, normalised so that equal weights give the MSE.
// Measured together with the colour-jittered VAE (docs/tiny-shapes.md): at
// 2500 steps colour and direction came out far better than the unweighted
// recipe's at 2500 (held-out 95.8 / 79.2% against 50.0 / 29.2%), shape two
// to four clips in 24 better; after 5000 steps shape read no better than
// before (41.7% seen): the blobs remain.

// Note [Weighting the outline]
// Measured on the shipped model (2026-12-05): in its normalised latents a
// circle and a square at the same place differ by an RMS of 0.32 over the
// shape's cells, a fifth of what a change of foreground colour makes (1.56),
// and the low-noise expert does not follow the shape word: drawn clips
// noised to σ 0.6 and denoised with the prompt naming square, triangle or
// circle all come back as circles (mean fill 0.79 / 0.78 / 0.79), and its
// error on the shape's cells at σ 0.6 grows by 3% when the shape word is
// swapped against 280% for the colour word. dit_outline_weight adds weight to the
// cells where the shapes differ: for each clip, the pixels where either
// other shape drawn at the same centre and size would differ from its own,
// pooled to latent cells (outline_pixels). Only masks of the other shapes are
// drawn, never encoded, so nothing of a held-out combination's appearance
// reaches the experts. Measured: weights 8 and 24 (4000 of 5000 steps) drew
// shapes no better (shape seen / held-out 45.8 / 41.7 and 45.8 / 33.3) and
// the fill per prompted shape stayed flat, so the default is 0.

// Note [Contrasting the shape word]
// Weighting the cells where the shapes differ did not make the experts read
// the shape word (Note [Weighting the outline]): the plain loss never asks
// the model to draw differently for different words, only to be right on
// average, and a blob is nearly as right as any shape. The contrast asks it
// directly. Each low-noise clip with a grammar prompt is predicted a second
// time with its shape word replaced by another shape's (never one that makes
// a held-out combination, so no held-out prompt is seen), and with e the
// velocity error over the shape's and outline's cells, the loss gains
// dit_shape_contrast · max(0, (1 + margin)·e_right − e_swapped): the right
// word must explain the clip better than a wrong one by the margin, and once
// it does the term stops pushing. The shipped model's figures, for scale: at
// σ 0.6 e_swapped is 3% above e_right for the shape word and 280% for the
// colour word. Costs a further forward and backward of the low-noise expert
// a step.

// Note [Training the experts]
// Rectified flow as the pipeline samples it (FlowMatchEulerDiscreteScheduler):
// x_σ = (1 − σ)·x₀ + σ·ε, the expert predicts v = ε − x₀ at timestep 1000·σ,
// and σ = shift·u / (1 + (shift − 1)·u) for u uniform, the density of the
// shifted inference schedule. The expert switch splits σ at boundary_ratio:
// each step trains `transformer` on dit_batch clips with σ ≥ boundary and
// `transformer_2` on dit_batch clips below it, both conditioned through the
// one text encoder, which learns from both losses. A fraction of prompts is
// replaced by "" so that classifier-free guidance (the pipeline's default,
// negative prompt "") has an unconditional model to contrast with. The
// weights saved are an exponential moving average of the trained ones.
struct Experts {
  UMT5EncoderModel text_encoder{nullptr};
  WanTransformer3DModel transformer{nullptr};
  WanTransformer3DModel transformer_2{nullptr};
};

using CheckpointFn = std::function<void(const Experts&)>;

// TrainOptions::experts_from: `dir`'s text encoder and experts into `e`;
// std::runtime_error when their configs are not this run's.
void load_trained_experts(const fs::path& dir, const ComponentConfigs& configs, Experts& e,
                          std::ostream& log) {
  check_same_config(dir / "text_encoder" / "config.json", configs.text_encoder);
  check_same_config(dir / "transformer" / "config.json", configs.transformer);
  check_same_config(dir / "transformer_2" / "config.json", configs.transformer);
  e.text_encoder->load_weights(io::Checkpoint::open_dir(dir / "text_encoder", "model"));
  e.transformer->load_weights(
      io::Checkpoint::open_dir(dir / "transformer", "diffusion_pytorch_model"));
  e.transformer_2->load_weights(
      io::Checkpoint::open_dir(dir / "transformer_2", "diffusion_pytorch_model"));
  log << "dit  text encoder and experts start from " << dir.string() << std::endl;
}

Experts train_experts(const TrainOptions& o, const ComponentConfigs& configs,
                      const io::Tokenizer& tokenizer, const LatentSet& data, std::mt19937_64& rng,
                      std::ostream& log, const CheckpointFn& checkpoint) {
  Experts e;
  const auto t_config =
      WanTransformer3DConfig::from_json(configs.transformer, "transformer config");
  const auto e_config = UMT5Config::from_json(configs.text_encoder, "text_encoder config");
  e.text_encoder = UMT5EncoderModel(e_config);
  initialise(*e.text_encoder, 1.0 / std::sqrt(static_cast<double>(e_config.d_kv)));
  e.transformer = WanTransformer3DModel(t_config);
  initialise(*e.transformer);
  e.transformer_2 = WanTransformer3DModel(t_config);
  initialise(*e.transformer_2);
  if (!o.experts_from.empty()) load_trained_experts(o.experts_from, configs, e, log);

  std::vector<torch::Tensor> params;
  for (auto* m : std::initializer_list<torch::nn::Module*>{
           e.text_encoder.get(), e.transformer.get(), e.transformer_2.get()})
    for (auto& p : m->parameters()) params.push_back(p);
  EmaWeights ema(params);
  torch::optim::AdamW optimizer(
      params, torch::optim::AdamWOptions(o.dit_lr).betas({0.9, 0.99}).weight_decay(0.01));

  // Every prompt (and "") fits with its EOS; Note [Prompt length in training].
  const std::int64_t length = longest_prompt_tokens(tokenizer, data.prompts);
  const int B = o.dit_batch;
  const double u_boundary = unshifted(kBoundaryRatio);
  std::uniform_real_distribution<double> unit(0.0, 1.0);

  const auto start = Clock::now();
  double running[3] = {0, 0, 0};
  // The contrast's own generator, so that a run without it draws exactly
  // what it drew before the contrast existed.
  std::mt19937_64 contrast_rng(o.seed + 3);
  int running_n = 0;
  for (int step = 0; step < o.dit_steps; ++step) {
    set_lr(optimizer, scheduled_lr(o.dit_lr, step, o.dit_steps));
    const bool full = unit(rng) < o.full_padding;
    std::vector<std::int64_t> index;
    std::vector<std::string> prompts;
    std::vector<float> sigmas;
    for (int i = 0; i < 2 * B; ++i) {
      auto example = draw_example(rng, data, o.prompt_dropout);
      index.push_back(example.index);
      prompts.push_back(std::move(example.prompt));
      // The first B for the high-noise expert, the rest for the low-noise one.
      const double u = i < B ? u_boundary + (1.0 - u_boundary) * unit(rng) : u_boundary * unit(rng);
      sigmas.push_back(static_cast<float>(shifted_sigma(u)));
    }
    const auto encode = [&](const std::vector<std::string>& texts) {
      const auto tokens = tokenizer.tokenize(texts, length);
      auto context = e.text_encoder(tokens.input_ids, tokens.attention_mask);
      context = context.masked_fill((tokens.attention_mask == 0).unsqueeze(-1), 0.0);
      if (!full) return context;
      const auto rows = static_cast<std::int64_t>(texts.size());
      return torch::cat(
          {context, torch::zeros({rows, kInferenceSequenceLength - length, context.size(2)})}, 1);
    };
    const auto context = encode(prompts);
    const auto [noisy, target, timestep, weight] =
        flow_matching_batch(data, index, sigmas, o.dit_object_weight, o.dit_outline_weight);
    const auto hi =
        e.transformer(noisy.narrow(0, 0, B), timestep.narrow(0, 0, B), context.narrow(0, 0, B));
    const auto lo =
        e.transformer_2(noisy.narrow(0, B, B), timestep.narrow(0, B, B), context.narrow(0, B, B));
    const auto loss_hi = weighted_mse(hi, target.narrow(0, 0, B), weight.narrow(0, 0, B));
    const auto loss_lo = weighted_mse(lo, target.narrow(0, B, B), weight.narrow(0, B, B));
    auto loss = loss_hi + loss_lo;
    if (o.dit_shape_contrast > 0) {
      // Note [Contrasting the shape word]: the low-noise clips again, each
      // with another shape's word.
      const std::vector<std::int64_t> lo_clips(index.begin() + B, index.end());
      const std::vector<std::string> lo_prompts(prompts.begin() + B, prompts.end());
      const auto contrast = shape_word_contrast(
          data, lo_clips, lo_prompts, std::vector<bool>(B, true), lo, target.narrow(0, B, B),
          o.dit_shape_margin, contrast_rng, [&](const torch::Tensor& rows, const auto& others) {
            return e.transformer_2(noisy.narrow(0, B, B).index_select(0, rows),
                                   timestep.narrow(0, B, B).index_select(0, rows), encode(others));
          });
      if (contrast.defined()) {
        loss = loss + o.dit_shape_contrast * contrast;
        running[2] += contrast.item<double>();
      }
    }
    optimizer_step(optimizer, loss, params);
    ema.update(step, o.ema_decay);
    running[0] += loss_hi.item<double>();
    running[1] += loss_lo.item<double>();
    ++running_n;
    if ((step + 1) % o.log_every == 0 || step + 1 == o.dit_steps) {
      log << "dit  step " << std::setw(5) << step + 1 << "/" << o.dit_steps << "  loss high "
          << std::fixed << std::setprecision(4) << running[0] / running_n << "  low "
          << running[1] / running_n;
      if (o.dit_shape_contrast > 0) log << "  contrast " << running[2] / running_n;
      log << "  " << elapsed_and_eta(start, step + 1, o.dit_steps) << std::endl;
      log.unsetf(std::ios::fixed);
      running[0] = running[1] = running[2] = 0;
      running_n = 0;
    }
    if (checkpoint && checkpoint_due(o, step)) ema.with_average([&] { checkpoint(e); });
  }
  ema.install();
  return e;
}

}  // namespace

TrainOptions TrainOptions::smoke() {
  TrainOptions o;
  o.sizes.vae_base_dim = 4;
  o.sizes.z_dim = 4;
  o.sizes.dit_heads = 2;
  o.sizes.dit_head_dim = 8;
  o.sizes.dit_layers = 1;
  o.sizes.dit_ffn = 32;
  o.sizes.text_dim = 32;
  o.sizes.text_layers = 1;
  o.vae_steps = 2;
  o.vae_batch = 1;
  o.vae_crop = 16;
  o.vae_full_steps = 1;
  o.checkpoint_every = 0;
  o.dataset_clips = 4;
  o.dit_steps = 2;
  o.dit_batch = 2;
  o.log_every = 1;
  return o;
}

void TrainOptions::validate() const {
  const auto positive = [](const char* field, double v) {
    if (!(v > 0)) throw std::invalid_argument(std::string(field) + " must be positive");
  };
  positive("threads", threads);
  positive("vae_steps", vae_steps);
  positive("vae_batch", vae_batch);
  positive("vae_lr", vae_lr);
  if (vae_crop != 0 && (vae_crop < 8 || vae_crop % 8 != 0))
    throw std::invalid_argument("vae_crop must be 0 or a multiple of 8");
  if (vae_full_steps < 0 || vae_full_steps > vae_steps)
    throw std::invalid_argument("vae_full_steps must be in 0..vae_steps");
  if (sizes.vae_temporal != 2 && sizes.vae_temporal != 4)
    throw std::invalid_argument("vae_temporal must be 2 or 4");
  if (vae_frames != 0 && (vae_frames < 1 || (vae_frames - 1) % sizes.vae_temporal != 0))
    throw std::invalid_argument("vae_frames must be 0 or 1 + " +
                                std::to_string(sizes.vae_temporal) + "k");
  if (vae_colour_jitter < 0 || vae_colour_jitter > 1)
    throw std::invalid_argument("vae_colour_jitter must be in [0, 1]");
  if (!(dit_object_weight >= 0)) throw std::invalid_argument("dit_object_weight must be >= 0");
  if (!(dit_outline_weight >= 0)) throw std::invalid_argument("dit_outline_weight must be >= 0");
  if (!(dit_shape_contrast >= 0)) throw std::invalid_argument("dit_shape_contrast must be >= 0");
  if (!(dit_shape_margin >= 0)) throw std::invalid_argument("dit_shape_margin must be >= 0");
  if (full_padding < 0 || full_padding > 1)
    throw std::invalid_argument("full_padding must be in [0, 1]");
  positive("dataset_clips", dataset_clips);
  positive("dit_steps", dit_steps);
  positive("dit_batch", dit_batch);
  positive("dit_lr", dit_lr);
  positive("log_every", log_every);
  if (prompt_dropout < 0 || prompt_dropout >= 1)
    throw std::invalid_argument("prompt_dropout must be in [0, 1)");
  if (ema_decay < 0 || ema_decay >= 1) throw std::invalid_argument("ema_decay must be in [0, 1)");
  if (tokenizer_type != "unigram" && tokenizer_type != "word")
    throw std::invalid_argument("tokenizer_type must be unigram or word");
  if (sizes.text_dim % 16 != 0) throw std::invalid_argument("text_dim must be a multiple of 16");
  if (sizes.vae_spatial != 4 && sizes.vae_spatial != 8)
    throw std::invalid_argument("vae_spatial must be 4 or 8");
  if (sizes.dit_patch < 1 || kClipGeometry.width % (sizes.vae_spatial * sizes.dit_patch) != 0 ||
      kClipGeometry.height % (sizes.vae_spatial * sizes.dit_patch) != 0)
    throw std::invalid_argument(
        "dit_patch must be positive and vae_spatial * dit_patch must divide the clip size");
}

// Note [CPU threads on a shared machine]
// Measured on the two-core machine this was trained on, while other jobs ran:
// OpenMP's and OpenBLAS' worker threads spin while they wait, and against
// other processes that made an expert step ~20× slower (7 s instead of
// 0.4 s). So the programs run with OMP_WAIT_POLICY=PASSIVE
// (ensure_passive_openmp), OpenBLAS with one thread (Note [CPU threads and
// BLAS]), and denormals flushed (tiny gradients late in training are ~100×
// slower on x86).
void configure_cpu(int threads) {
  omni::device::set_cpu_threads({.intra_op = threads, .blas = 1});
  at::globalContext().setFlushDenormal(true);
}

void ensure_passive_openmp(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  ::execv("/proc/self/exe", argv);  // returns only on failure: carry on as we are
}

// Note [Word pieces]
// spm_train's unigram model, asked for 64 pieces on the grammar's ~180
// prompts, keeps 46 that are nearly letters: "a red triangle" is
// `▁ a ▁ re d ▁ t ri a ng le`, 34 tokens a prompt, so the text encoder must
// assemble every word from letters at shifting positions. Its word model
// gives one piece per word of the grammar (23 pieces, 9–10 tokens a prompt),
// each attribute a single token. Both are SentencePiece models that
// T5Tokenizer and the runtime's tokenizer read. Measured with the same VAE
// and recipe (docs/tiny-shapes.md): the word model equals or beats the
// unigram one on every rate; held-out red on gray went from faint or
// missing to drawn (held-out foreground 83.3% → 100%, direction 83.3% →
// 100%); shape barely moved (seen 41.7% → 45.8%).

void train_tiny_shapes(const TrainOptions& o, const fs::path& out_dir, std::ostream& log) {
  auto run = begin_run(o, out_dir);
  auto& rng = run.rng;
  auto& configs = run.configs;

  // Tokenizer: the grammar's training prompts only (held-out combinations
  // use the same words; Note [Held-out combinations]).
  std::vector<std::string> corpus;
  for (const auto& spec : all_specs())
    if (!is_held_out(spec)) corpus.push_back(prompt_of(spec));
  const auto spiece = train_tokenizer(out_dir / "tokenizer", corpus, 64, o.tokenizer_type);
  const auto tokenizer = io::Tokenizer::from_file(spiece);
  if (tokenizer.vocab_size() > o.sizes.vocab_size)
    throw std::runtime_error("the tokenizer has more pieces than the text encoder embeds");
  log << "tokenizer: " << tokenizer.vocab_size() << " pieces" << std::endl;
  if (!o.experts_from.empty()) check_same_tokenizer(o.experts_from, tokenizer);

  auto [vae, data] = prepare_training_data(o, configs, rng, log);
  const auto write = [&](const Experts& experts) {
    write_model_dir(out_dir, configs,
                    {experts.text_encoder, experts.transformer, experts.transformer_2, vae});
  };
  const auto experts = train_experts(o, configs, tokenizer, data, rng, log, [&](const Experts& e) {
    write(e);
    log << "checkpoint written to " << out_dir.string() << std::endl;
  });
  write(experts);
  log_written(log, out_dir, run.start);
}

}  // namespace omni::train
