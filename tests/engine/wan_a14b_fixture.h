// A Wan2.2-T2V-A14B diffusers directory with the real config.json files and
// header-only safetensors: every tensor of the architecture is listed with its
// dtype, shape and offsets, and the file is extended to its declared size with
// ftruncate, so the 68 GB of weights occupy no disk blocks and no byte of
// data is ever written. Field values from shared/reference/wan22-a14b-facts.md.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/wan_tensor_layout.h"
#include "omni/io/safetensors.h"

namespace omni::testing {

namespace fs = std::filesystem;

// Writes `json` to `path` (creating folders).
inline void write_json(const fs::path& path, const nlohmann::json& json) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << json.dump(2) << "\n";
}

// A valid safetensors header for `layout` followed by a hole of the declared
// data size. Returns the file's size.
inline std::uint64_t write_header_only_safetensors(const fs::path& path, const TensorLayout& layout,
                                                   io::DType dtype) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"}};
  std::uint64_t offset = 0;
  const auto element = io::element_size(dtype);
  for (const auto& [name, shape] : layout) {
    std::uint64_t bytes = element;
    for (auto d : shape) bytes *= static_cast<std::uint64_t>(d);
    header[name] = {{"dtype", std::string(io::to_string(dtype))},
                    {"shape", shape},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned, as in the reference
  fs::create_directories(path.parent_path());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot create " + path.string());
  std::uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<std::uint8_t>(text.size() >> (8 * i));
  const bool ok = ::write(fd, length, 8) == 8 &&
                  ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                  ::ftruncate(fd, static_cast<off_t>(8 + text.size() + offset)) == 0;
  ::close(fd);
  if (!ok) throw std::runtime_error("cannot write " + path.string());
  return 8 + text.size() + offset;
}

// Splits `layout` into shards of at most `max_shard_bytes` (a tensor never
// straddles two), writes `<stem>-0000i-of-0000n.safetensors` and
// `<stem>.safetensors.index.json`, as save_pretrained does.
inline void write_sharded(const fs::path& dir, const std::string& stem, const TensorLayout& layout,
                          io::DType dtype, std::uint64_t max_shard_bytes) {
  std::vector<TensorLayout> shards(1);
  std::uint64_t current = 0, total = 0;
  for (const auto& entry : layout) {
    std::uint64_t bytes = io::element_size(dtype);
    for (auto d : entry.second) bytes *= static_cast<std::uint64_t>(d);
    if (current + bytes > max_shard_bytes && !shards.back().empty()) {
      shards.emplace_back();
      current = 0;
    }
    shards.back().push_back(entry);
    current += bytes;
    total += bytes;
  }
  nlohmann::json index;
  index["metadata"] = {{"total_size", total}};
  index["weight_map"] = nlohmann::json::object();
  char name[128];
  for (std::size_t i = 0; i < shards.size(); ++i) {
    std::snprintf(name, sizeof name, "%s-%05zu-of-%05zu.safetensors", stem.c_str(), i + 1,
                  shards.size());
    write_header_only_safetensors(dir / name, shards[i], dtype);
    for (const auto& [tensor, shape] : shards[i]) index["weight_map"][tensor] = name;
  }
  write_json(dir / (stem + ".safetensors.index.json"), index);
}

inline nlohmann::json a14b_transformer_config() {
  return nlohmann::json::parse(R"({
    "_class_name": "WanTransformer3DModel", "_diffusers_version": "0.35.0.dev0",
    "added_kv_proj_dim": null, "attention_head_dim": 128, "cross_attn_norm": true,
    "eps": 1e-06, "ffn_dim": 13824, "freq_dim": 256, "image_dim": null, "in_channels": 16,
    "num_attention_heads": 40, "num_layers": 40, "out_channels": 16, "patch_size": [1, 2, 2],
    "pos_embed_seq_len": null, "qk_norm": "rms_norm_across_heads", "rope_max_seq_len": 1024,
    "text_dim": 4096})");
}

inline nlohmann::json a14b_text_encoder_config() {
  return nlohmann::json::parse(R"({
    "architectures": ["UMT5EncoderModel"], "classifier_dropout": 0.0, "d_ff": 10240,
    "d_kv": 64, "d_model": 4096, "decoder_start_token_id": 0, "dense_act_fn": "gelu_new",
    "dropout_rate": 0.1, "eos_token_id": 1, "feed_forward_proj": "gated-gelu",
    "initializer_factor": 1.0, "is_encoder_decoder": true, "is_gated_act": true,
    "layer_norm_epsilon": 1e-06, "model_type": "umt5", "num_decoder_layers": 24,
    "num_heads": 64, "num_layers": 24, "output_past": true, "pad_token_id": 0,
    "relative_attention_max_distance": 128, "relative_attention_num_buckets": 32,
    "scalable_attention": true, "tie_word_embeddings": false, "tokenizer_class": "T5Tokenizer",
    "torch_dtype": "bfloat16", "transformers_version": "4.51.3", "use_cache": true,
    "vocab_size": 256384})");
}

inline nlohmann::json a14b_vae_config() {
  return nlohmann::json::parse(R"({
    "_class_name": "AutoencoderKLWan", "_diffusers_version": "0.35.0.dev0",
    "attn_scales": [], "base_dim": 96, "dim_mult": [1, 2, 4, 4], "dropout": 0.0,
    "latents_mean": [-0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508,
                     0.4134, -0.0715, 0.5517, -0.3632, -0.1922, -0.9497, 0.2503, -0.2921],
    "latents_std": [2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743,
                    3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.916],
    "num_res_blocks": 2, "temperal_downsample": [false, true, true], "z_dim": 16})");
}

inline nlohmann::json a14b_model_index() {
  return nlohmann::json::parse(R"({
    "_class_name": "WanPipeline", "_diffusers_version": "0.35.0.dev0",
    "boundary_ratio": 0.875, "expand_timesteps": false,
    "scheduler": ["diffusers", "UniPCMultistepScheduler"],
    "text_encoder": ["transformers", "UMT5EncoderModel"],
    "tokenizer": ["transformers", "T5TokenizerFast"],
    "transformer": ["diffusers", "WanTransformer3DModel"],
    "transformer_2": ["diffusers", "WanTransformer3DModel"],
    "vae": ["diffusers", "AutoencoderKLWan"]})");
}

// Whether `dir`'s filesystem keeps holes (else the fixture would write 68 GB).
inline bool filesystem_keeps_holes(const fs::path& dir) {
  fs::create_directories(dir);
  const auto probe = dir / ".sparse_probe";
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  const bool truncated = ::ftruncate(fd, 1ll << 30) == 0;
  struct stat st {};
  const bool ok = truncated && ::fstat(fd, &st) == 0 && st.st_blocks * 512ll < (1ll << 20);
  ::close(fd);
  fs::remove(probe);
  return ok;
}

// Writes the whole directory. The transformers are bf16 in 10 GB shards
// (diffusers' default max_shard_size), the text encoder bf16 in 5 GB shards
// (transformers' default), the VAE one float32 file (508 MB, as released).
inline void write_a14b_directory(const fs::path& dir) {
  using namespace omni::models::wan;
  write_json(dir / "model_index.json", a14b_model_index());
  write_json(dir / "scheduler" / "scheduler_config.json",
             {{"_class_name", "UniPCMultistepScheduler"},
              {"num_train_timesteps", 1000},
              {"flow_shift", 12.0},
              {"prediction_type", "flow_prediction"},
              {"use_flow_sigmas", true}});
  write_json(dir / "tokenizer" / "tokenizer_config.json",
             {{"tokenizer_class", "T5Tokenizer"}, {"model_max_length", 512}});
  const auto transformer = WanTransformer3DConfig::from_json(a14b_transformer_config(), "a14b");
  for (const char* name : {"transformer", "transformer_2"}) {
    write_json(dir / name / "config.json", a14b_transformer_config());
    write_sharded(dir / name, "diffusion_pytorch_model", wan_transformer_layout(transformer),
                  io::DType::BF16, 10'000'000'000ull);
  }
  write_json(dir / "text_encoder" / "config.json", a14b_text_encoder_config());
  write_sharded(dir / "text_encoder", "model",
                umt5_encoder_layout(UMT5Config::from_json(a14b_text_encoder_config(), "a14b")),
                io::DType::BF16, 5'000'000'000ull);
  write_json(dir / "vae" / "config.json", a14b_vae_config());
  write_header_only_safetensors(
      dir / "vae" / "diffusion_pytorch_model.safetensors",
      autoencoder_kl_wan_layout(AutoencoderKLWanConfig::from_json(a14b_vae_config(), "a14b")),
      io::DType::F32);
}

}  // namespace omni::testing
