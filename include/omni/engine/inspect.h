// omni inspect: the plan of a model before any weight is read (design.md
// "Plan, then run"): its components, their roles, parameter counts, bytes by
// dtype, and the peak resident weight bytes planned with and without
// model-level offload.
//
//   auto plan = omni::inspect_model("/models/Wan2.2-T2V-A14B-Diffusers");
//   for (const auto& c : plan.components) std::cout << c.name << " " << c.bytes << "\n";
//   std::cout << plan.to_json().dump(2);
//
// For a diffusers directory only `model_index.json`, each component's
// `config.json` and the headers of its safetensors files are read (never the
// tensor data), so it takes well under a second and a few MB of memory even
// for a 126 GB checkpoint. Built-in examples are constructed and counted
// from the module.
//
// Note [Roles by component name]
// diffusers pipelines name their components uniformly, and roles follow the
// name: `transformer*`, `unet*` → dit; `text_encoder*`, `image_encoder*` →
// encoder; `vae*` → vae; tokenizers, schedulers and feature extractors have
// no weights; any other component with weights is resident. For WanPipeline
// this gives transformer/transformer_2 = dit, text_encoder = encoder,
// vae = vae, exactly the lists the pipeline declares for offload. An
// `OmniUnifiedTransformer` folder is two rows, `transformer.reasoner` and
// `transformer.generator`, role split (Note [A split transformer in a
// directory], inspect.cpp).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "omni/io/safetensors.h"
#include "omni/offload/auto_plan.h"
#include "omni/offload/components.h"
#include "omni/offload/host_memory_plan.h"
#include "omni/pipelines/dtype_spec.h"

namespace omni {

// Parameters and bytes of one dtype inside a component (or the model).
struct DTypeBytes {
  std::uint64_t parameters = 0;  // elements
  std::uint64_t bytes = 0;
};

struct ComponentPlan {
  std::string name;                   // model_index.json key (folder), or the dotted module path
  std::string class_name;             // e.g. "WanTransformer3DModel"; empty when unknown
  std::optional<offload::Role> role;  // nullopt: no weights (tokenizer, scheduler)
  std::uint64_t tensors = 0;
  std::uint64_t parameters = 0;  // elements of every stored tensor
  std::uint64_t bytes = 0;
  std::map<io::DType, DTypeBytes> by_dtype;
  // The weight files whose headers were read (directories only).
  std::vector<std::filesystem::path> files;
  // What the component's config.json implies for the architectures omni
  // implements (WanTransformer3DModel, UMT5EncoderModel, AutoencoderKLWan).
  std::optional<std::uint64_t> config_parameters;
  // The dtype the component loads in (Note [Dtype from the checkpoint]) and
  // its weights' bytes once loaded: the stored bytes when that is the
  // stored dtype, else every floating-point tensor at the chosen dtype's
  // size (modules a model keeps in float32 are not counted apart).
  std::optional<io::DType> load_dtype;
  std::uint64_t load_bytes = 0;
  // Of load_bytes: tensors the loaded module computes rather than reads
  // (Note [Buffers the model computes], inspect.cpp), which offload homes
  // like weights.
  std::uint64_t computed_bytes = 0;
  // Of load_bytes, by Note [Block groups] read off the tensor names: the
  // bytes in `blocks.N`-style groups, the largest of them, and the largest
  // group of any kind (what streaming and layerwise offload move at a time).
  std::uint64_t block_bytes = 0;
  std::uint64_t largest_block = 0;
  std::uint64_t largest_group = 0;
  // Something a user should know (a count that disagrees with the config, a
  // config omni cannot read); empty when all is well.
  std::string note;
};

// `omni inspect --device-memory-budget`: what each offload mode would do
// under the budget for one request with the model's defaults, and what
// `--offload auto` would pick (Note [Choosing an offload mode]).
struct DevicePlan {
  std::uint64_t budget_bytes = 0;
  std::size_t prefetch_blocks = 1;
  std::vector<std::string> calls;  // one default request's component calls, in order
  std::string calls_from;          // how they were found, for people
  std::vector<offload::ModeEstimate> modes;
  std::optional<offload::OffloadChoice> choice;  // nullopt: nothing runs under the budget
  std::string no_choice;                         // why, then
  // Where each component's weights spend a request under the choice.
  std::map<std::string, std::string> placement;

  // The calls, run-length: "text_encoder ×2, transformer ×24, …".
  std::string calls_summary() const;
};

struct ModelPlan {
  std::string model;           // as given
  std::string pipeline_class;  // model_index.json `_class_name`, or the built-in's name
  bool builtin = false;
  std::vector<ComponentPlan> components;  // by name (model_index.json's order)
  std::uint64_t parameters = 0;
  std::uint64_t bytes = 0;
  std::map<io::DType, DTypeBytes> by_dtype;
  std::string dtype = "auto";    // the DtypeSpec planned with
  std::uint64_t load_bytes = 0;  // every component's load_bytes
  // Peak resident weight bytes (of load_bytes): with model-level offload,
  // max(sum of encoders, largest DiT, largest split component) + VAEs + resident modules
  // (offload::planned_model_level_peak); without offload, the sum of all.
  std::uint64_t planned_peak_with_offload_bytes = 0;
  std::uint64_t planned_peak_without_offload_bytes = 0;
  // Which homes are pinned and which mapped (Note [Mapped homes]).
  offload::HostMemoryPlan host_plan;
  // With InspectOptions::device_memory_budget_bytes.
  std::optional<DevicePlan> device_plan;

  const ComponentPlan* component(std::string_view name) const;
  // Every field, bytes as integers; roles and dtypes by name.
  nlohmann::json to_json() const;
};

// Plans `model`: a diffusers directory (model_index.json) or a built-in
// ("example:wan-shaped"). Reads headers only (see above). ConfigError for an
// unknown built-in or a path that is no directory; FormatError naming the
// file for a missing model_index.json, a component folder without
// safetensors weights, a bad index.json (shard missing, tensor not in its
// shard, shard outside the folder) or a malformed safetensors header.
// Synchronous. A directory is inspected without touching global state (any
// thread); building a built-in seeds LibTorch's global generator.
struct InspectOptions {
  // What `--dtype` would load (ConfigError naming a component the model lacks).
  pipelines::DtypeSpec dtype;
  // `--host-memory-budget` (nullopt: none) and `--pinned-staging`
  // (Note [Mapped homes]).
  std::optional<std::uint64_t> host_memory_budget_bytes;
  std::uint64_t pinned_staging_bytes = 512ull << 20;
  // `--device-memory-budget` (nullopt: no device plan) and `--prefetch-blocks`.
  std::optional<std::uint64_t> device_memory_budget_bytes;
  std::size_t prefetch_blocks = 1;
};

ModelPlan inspect_model(const std::string& model, const InspectOptions& options = {});

// The host memory plan of a model plan's components (by load_bytes).
offload::HostMemoryPlan plan_host_memory(const ModelPlan& plan,
                                         std::optional<std::uint64_t> budget_bytes,
                                         std::uint64_t staging_bytes);

}  // namespace omni
