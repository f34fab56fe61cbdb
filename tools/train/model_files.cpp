// Configs and the diffusers directory of models/tiny-shapes (model_files.h).
#include "model_files.h"

#include <cstdlib>
#include <fstream>
#include <stdexcept>

#include "omni/io/checkpoint.h"
#include "omni/io/safetensors.h"
#include "shapes.h"
#include "training_parts.h"

namespace fs = std::filesystem;

namespace omni::train {

namespace parts {

void write_json(const fs::path& path, const nlohmann::json& json) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path);
  out << json.dump(2) << "\n";
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

void save_float32(const torch::nn::Module& module, const fs::path& file,
                  const std::vector<std::string>& skip) {
  fs::create_directories(file.parent_path());
  auto state = io::named_state(module, skip);
  for (auto& [name, tensor] : state) tensor = tensor.detach().to(torch::kFloat32).contiguous();
  io::save_safetensors(file, state);
}

}  // namespace parts

using parts::write_json;

namespace {

std::string quoted(const fs::path& path) {
  std::string out = "'";
  for (char c : path.string()) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// One flag per downsampling level (2 at vae_spatial 4, 3 at 8): the first
// levels keep time and the last one or two halve it, as Wan's [false, true,
// true] does.
nlohmann::json temporal_flags(const ModelSizes& s) {
  const auto levels = s.vae_spatial == 8 ? 3 : 2;
  const auto halving = s.vae_temporal == 4 ? 2 : 1;
  auto flags = nlohmann::json::array();
  for (int i = 0; i < levels; ++i) flags.push_back(i >= levels - halving);
  return flags;
}

}  // namespace

ComponentConfigs component_configs(const ModelSizes& s) {
  ComponentConfigs c;
  c.text_encoder = {{"architectures", {"UMT5EncoderModel"}},
                    {"classifier_dropout", 0.0},
                    {"d_ff", 2 * s.text_dim},
                    {"d_kv", 16},
                    {"d_model", s.text_dim},
                    {"decoder_start_token_id", 0},
                    {"dense_act_fn", "gelu_new"},
                    {"dropout_rate", 0.0},
                    {"eos_token_id", 1},
                    {"feed_forward_proj", "gated-gelu"},
                    {"initializer_factor", 1.0},
                    {"is_encoder_decoder", true},
                    {"is_gated_act", true},
                    {"layer_norm_epsilon", 1e-6},
                    {"model_type", "umt5"},
                    {"num_decoder_layers", s.text_layers},
                    {"num_heads", s.text_dim / 16},
                    {"num_layers", s.text_layers},
                    {"pad_token_id", 0},
                    {"relative_attention_max_distance", 32},
                    {"relative_attention_num_buckets", 16},
                    {"tie_word_embeddings", false},
                    {"tokenizer_class", "T5Tokenizer"},
                    {"torch_dtype", "float32"},
                    {"use_cache", true},
                    {"vocab_size", s.vocab_size}};
  c.transformer = {{"_class_name", "WanTransformer3DModel"},
                   {"_diffusers_version", "0.35.0"},
                   {"added_kv_proj_dim", nullptr},
                   {"attention_head_dim", s.dit_head_dim},
                   {"cross_attn_norm", true},
                   {"eps", 1e-6},
                   {"ffn_dim", s.dit_ffn},
                   {"freq_dim", 64},
                   {"image_dim", nullptr},
                   {"in_channels", s.z_dim},
                   {"num_attention_heads", s.dit_heads},
                   {"num_layers", s.dit_layers},
                   {"out_channels", s.z_dim},
                   {"patch_size", {1, s.dit_patch, s.dit_patch}},
                   {"pos_embed_seq_len", nullptr},
                   {"qk_norm", "rms_norm_across_heads"},
                   {"rope_max_seq_len", 64},
                   {"text_dim", s.text_dim}};
  c.vae = {{"_class_name", "AutoencoderKLWan"},
           {"_diffusers_version", "0.35.0"},
           {"attn_scales", nlohmann::json::array()},
           {"base_dim", s.vae_base_dim},
           {"decoder_base_dim", nullptr},
           {"dim_mult", s.vae_spatial == 8 ? nlohmann::json{1, 2, 2, 2} : nlohmann::json{1, 2, 2}},
           {"dropout", 0.0},
           {"in_channels", 3},
           {"is_residual", false},
           {"latents_mean", std::vector<double>(static_cast<std::size_t>(s.z_dim), 0.0)},
           {"latents_std", std::vector<double>(static_cast<std::size_t>(s.z_dim), 1.0)},
           {"num_res_blocks", 1},
           {"out_channels", 3},
           {"patch_size", nullptr},
           {"scale_factor_spatial", s.vae_spatial},
           {"scale_factor_temporal", s.vae_temporal},
           {"temperal_downsample", temporal_flags(s)},
           {"z_dim", s.z_dim}};
  c.scheduler = {{"_class_name", "FlowMatchEulerDiscreteScheduler"},
                 {"_diffusers_version", "0.35.0"},
                 {"base_image_seq_len", 256},
                 {"base_shift", 0.5},
                 {"invert_sigmas", false},
                 {"max_image_seq_len", 4096},
                 {"max_shift", 1.15},
                 {"num_train_timesteps", kNumTrainTimesteps},
                 {"shift", kFlowShift},
                 {"shift_terminal", nullptr},
                 {"stochastic_sampling", false},
                 {"time_shift_type", "exponential"},
                 {"use_beta_sigmas", false},
                 {"use_dynamic_shifting", false},
                 {"use_exponential_sigmas", false},
                 {"use_karras_sigmas", false}};
  c.model_index = {{"_class_name", "WanPipeline"},
                   {"_diffusers_version", "0.35.0"},
                   {"boundary_ratio", kBoundaryRatio},
                   {"expand_timesteps", false},
                   {"scheduler", {"diffusers", "FlowMatchEulerDiscreteScheduler"}},
                   {"text_encoder", {"transformers", "UMT5EncoderModel"}},
                   {"tokenizer", {"transformers", "T5TokenizerFast"}},
                   {"transformer", {"diffusers", "WanTransformer3DModel"}},
                   {"transformer_2", {"diffusers", "WanTransformer3DModel"}},
                   {"vae", {"diffusers", "AutoencoderKLWan"}}};
  c.request_defaults = {{"width", kClipGeometry.width},
                        {"height", kClipGeometry.height},
                        {"num_frames", kClipGeometry.frames},
                        {"fps", 8}};
  return c;
}

fs::path train_tokenizer(const fs::path& dir, const std::vector<std::string>& sentences,
                         int vocab_size, const std::string& model_type) {
  fs::create_directories(dir);
  const auto corpus = dir / "corpus.txt";
  {
    std::ofstream out(corpus);
    for (const auto& s : sentences) out << s << "\n";
  }
  const auto log = dir / "spm_train.log";
  // T5 ids (tokenizer.h).
  const std::string command = "spm_train --input=" + quoted(corpus) +
                              " --model_prefix=" + quoted(dir / "spiece") +
                              " --vocab_size=" + std::to_string(vocab_size) +
                              " --hard_vocab_limit=false --model_type=" + model_type +
                              " --character_coverage=1.0"
                              " --pad_id=0 --eos_id=1 --unk_id=2 --bos_id=-1 --num_threads=1"
                              " --minloglevel=2 > " +
                              quoted(log) + " 2>&1";
  if (std::system(command.c_str()) != 0)
    throw std::runtime_error(
        "spm_train failed (is the Debian package 'sentencepiece' "
        "installed?); see " +
        log.string());
  fs::remove(corpus);
  fs::remove(log);
  fs::remove(dir / "spiece.vocab");
  write_json(dir / "tokenizer_config.json", {{"tokenizer_class", "T5Tokenizer"},
                                             {"eos_token", "</s>"},
                                             {"pad_token", "<pad>"},
                                             {"unk_token", "<unk>"},
                                             {"extra_ids", 0}});
  return dir / "spiece.model";
}

void write_model_dir(const fs::path& dir, const ComponentConfigs& configs,
                     const TrainedModel& model) {
  fs::create_directories(dir);
  const auto& save = parts::save_float32;
  write_json(dir / "text_encoder" / "config.json", configs.text_encoder);
  save(*model.text_encoder, dir / "text_encoder" / "model.safetensors", {});
  const auto skip = models::wan::WanTransformer3DModelImpl::non_persistent_buffers();
  write_json(dir / "transformer" / "config.json", configs.transformer);
  save(*model.transformer, dir / "transformer" / "diffusion_pytorch_model.safetensors", skip);
  write_json(dir / "transformer_2" / "config.json", configs.transformer);
  save(*model.transformer_2, dir / "transformer_2" / "diffusion_pytorch_model.safetensors", skip);
  write_json(dir / "vae" / "config.json", configs.vae);
  save(*model.vae, dir / "vae" / "diffusion_pytorch_model.safetensors", {});
  write_json(dir / "scheduler" / "scheduler_config.json", configs.scheduler);
  write_json(dir / "omni_defaults.json", configs.request_defaults);
  write_json(dir / "model_index.json", configs.model_index);
}

}  // namespace omni::train
