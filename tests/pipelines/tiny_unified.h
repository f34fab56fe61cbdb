// A tiny random OmniUnifiedPipeline directory, written by the tests
// themselves: model_index.json, tokenizer/spiece.model (spm_train),
// transformer/ (OmniUnifiedTransformer: config.json + one safetensors file
// with reasoner.* and generator.* keys), vae/ (the reference fixture's tiny
// config, random weights), scheduler/ (FlowMatchEuler, shift 3) and
// omni_defaults.json (32×32, 5 frames, 3 steps).
#pragma once

#include <torch/torch.h>

#include <filesystem>

#include "models/tiny_unified_config.h"
#include "omni/models/unified/omni_unified_transformer.h"
#include "pipelines/tiny_wan.h"

namespace tiny_unified {

namespace fs = std::filesystem;

struct Options {
  std::uint64_t seed = 4321;
  bool defaults_file = true;
};

inline fs::path make_pipeline(const fs::path& dir, const Options& options = {}) {
  using omni::models::unified::OmniUnifiedTransformer;
  using omni::models::unified::OmniUnifiedTransformerConfig;
  using omni::models::unified::OmniUnifiedTransformerImpl;
  {
    const auto json = transformer_config();
    OmniUnifiedTransformer model(OmniUnifiedTransformerConfig::from_json(json, "transformer"));
    tiny_wan::randomize(*model, options.seed + 1);
    tiny_wan::write_json(dir / "transformer" / "config.json", json);
    tiny_wan::save_module(*model, dir / "transformer" / "diffusion_pytorch_model.safetensors",
                          OmniUnifiedTransformerImpl::non_persistent_buffers());
  }
  {
    const auto v_json = omni::io::read_json_file(tiny_wan::data("wan_pipeline/vae/config.json"));
    tiny_wan::AutoencoderKLWan vae(tiny_wan::AutoencoderKLWanConfig::from_json(v_json, "vae"));
    tiny_wan::randomize(*vae, options.seed + 2, /*output_scale=*/0.5);
    tiny_wan::write_json(dir / "vae" / "config.json", v_json);
    tiny_wan::save_module(*vae, dir / "vae" / "diffusion_pytorch_model.safetensors");
  }
  tiny_wan::train_spiece(dir / "tokenizer");
  tiny_wan::write_json(
      dir / "scheduler" / "scheduler_config.json",
      omni::io::read_json_file(tiny_wan::data("scheduler_flowmatch_euler_shift3/config.json")));
  if (options.defaults_file)
    tiny_wan::write_json(dir / "omni_defaults.json", {{"width", 32},
                                                      {"height", 32},
                                                      {"num_frames", 5},
                                                      {"steps", 3},
                                                      {"guidance_scale", 4.0},
                                                      {"fps", 8}});
  tiny_wan::write_json(dir / "model_index.json",
                       {{"_class_name", "OmniUnifiedPipeline"},
                        {"_diffusers_version", "0.35.0"},
                        {"scheduler", {"diffusers", "FlowMatchEulerDiscreteScheduler"}},
                        {"tokenizer", {"transformers", "T5TokenizerFast"}},
                        {"transformer", {"omni", "OmniUnifiedTransformer"}},
                        {"vae", {"diffusers", "AutoencoderKLWan"}}});
  return dir;
}

}  // namespace tiny_unified
