// LoRA files for Wan DiTs, read as users have them and fused into a
// component's weights once, at load (Note [Fusing a LoRA]).
#pragma once

#include <torch/nn/module.h>

#include <cstddef>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "omni/io/safetensors.h"

namespace omni::models::wan {

// One --lora COMPONENT=PATH[:SCALE].
struct LoraSpec {
  std::string component;  // a component of the pipeline: "transformer", "transformer_2", …
  std::filesystem::path path;
  double scale = 1.0;
  // "COMPONENT=PATH[:SCALE]"; a last ":X" is the scale only when X is a
  // number. ConfigError naming the text otherwise.
  static LoraSpec parse(std::string_view text);
  // ConfigError for an empty component or path, or a scale that is not finite.
  void validate() const;
};

// What fuse_lora did: which tensors it changed and what of the file it used.
struct LoraFusion {
  std::string component;
  std::string path;
  double scale = 1.0;
  std::string style;             // "original-wan", "peft", "kohya", or several joined with '+'
  std::size_t pairs = 0;         // the file's updates: low-rank pairs and full diffs
  std::size_t unused_pairs = 0;  // of those, matching no tensor of the component
  std::vector<std::string> unused_keys;  // the first few of their keys
  std::vector<std::string> touched;      // the component's tensors that changed, by name
};

// Note [Fusing a LoRA]
// A LoRA file holds, per target linear (or conv) layer, a low-rank pair and
// optionally an alpha; fusing adds
//     ΔW = scale · α/r · up·down        (r = down's rows; α = r without alpha)
// to the target's weight, summed in float32 and rounded once to the weight's
// dtype, as Wan2.2-Lightning's own merge does. Full diffs (`X.diff`,
// `X.diff_b`, as lightx2v ships for some layers) add scale · diff to X's
// weight or bias the same way.
// Key styles accepted, and mapped to the module's own (diffusers) names:
// - original Wan: `diffusion_model.blocks.N.self_attn.q.lora_down.weight`,
//   `.lora_up.weight`, `.alpha` (Lightning, lightx2v);
// - PEFT/diffusers: `transformer.blocks.N.attn1.to_q.lora_A.weight`,
//   `.lora_B.weight` (no alpha: α = r, so scale 1);
// - Kohya: `lora_unet_blocks_N_self_attn_q.lora_down.weight`, `.alpha`.
// Prefixes `diffusion_model.`, `model.diffusion_model.`, `transformer.` and
// `base_model.model.` are dropped; `lora_A/lora_B` and `lora_down/lora_up`
// mean the same in every style.
// omni::Omni fuses each tensor into its host home as offload fills it (one
// without a home: in place): offload moves the bytes it moved without a
// LoRA, a request pays nothing, and loading holds no second copy. A home
// left in the mapped checkpoint (Note [Mapped homes]), like a weight that
// aliases it, gets private pages where it is written. Scale 0 adds exact
// zeros: the weights stay bitwise the same.

// A LoRA file matched against a component: every key resolved to a tensor
// of the module and every shape checked; nothing written yet. Keeps the
// file mapped while it lives.
class LoraPlan {
 public:
  // Plans `spec`'s file against `module` (the component `spec.component`
  // names). FormatError naming a few of the file's keys when none matches a
  // tensor of the module, and naming the key and both shapes when an update
  // does not fit its target. A partial match is not an error: summary()
  // says what was unused.
  static LoraPlan make(const torch::nn::Module& module, const LoraSpec& spec);

  // What the plan changes (`touched`: every tensor it will change).
  const LoraFusion& summary() const { return summary_; }
  bool changes(const std::string& tensor) const { return updates_.count(tensor) != 0; }
  // Adds this LoRA's updates of the module's tensor `name` to `tensor` in
  // place: the live weight or its host home, of the planned shape, on any
  // device (Note [Fusing a LoRA]). Not thread-safe with itself.
  void apply(const std::string& name, torch::Tensor& tensor) const;

 private:
  struct Update {
    std::string down, up;  // a low-rank pair, or
    std::string diff;      // a full diff
    double factor = 1.0;   // scale · α/r, or scale
  };
  std::shared_ptr<io::SafetensorsFile> file_;
  std::map<std::string, std::vector<Update>> updates_;
  LoraFusion summary_;
};

// LoraPlan::make, then apply to every tensor it changes in `module`.
LoraFusion fuse_lora(torch::nn::Module& module, const LoraSpec& spec);

// The original Wan name of a diffusers WanTransformer3DModel tensor or
// module path (`blocks.0.attn1.to_q` → `blocks.0.self_attn.q`); the path
// itself when the two agree or it has no counterpart.
std::string wan_original_name(std::string_view diffusers_path);

}  // namespace omni::models::wan
