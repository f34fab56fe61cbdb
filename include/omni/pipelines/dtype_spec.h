// The dtype each component is loaded in: `--dtype`, `EngineArgs::dtype`,
// the Python keyword `dtype`.
//
//   auto spec = omni::pipelines::DtypeSpec::parse("bfloat16,vae=float32");
//   spec.for_component("transformer");  // kBFloat16
//   spec.for_component("vae");          // kFloat32
//   DtypeSpec::parse("auto").for_component("vae");  // nullopt: the stored dtype
//
// Note [Dtype from the checkpoint]
// A checkpoint says what it is: Wan2.2 A14B's experts and encoder are
// stored in bfloat16 (28.6 GB per expert), its VAE in float32. Loading a
// component in another dtype than its file doubles (float32) or halves
// (float16) its memory and changes its numbers, so the default, `auto`,
// keeps each component's stored dtype: the floating-point dtype that holds
// most of its checkpoint's bytes. A file may mix dtypes (diffusers saves
// the modules it keeps in float32, the experts' norms and modulation
// tables, in float32 beside bfloat16 weights); its majority decides, and
// the model keeps its own float32 modules either way. A spec is a comma
// list of `DTYPE` (every component; at most once) and `COMPONENT=DTYPE`
// items, DTYPE one of auto, float32/fp32, bfloat16/bf16, float16/fp16.
// A DTYPE for every component leaves VAEs alone (they keep their stored
// dtype unless named, `vae=bfloat16`): diffusers' Wan examples decode in
// float32 whatever the pipeline's dtype, and a VAE is small.
// Component names are checked against the model's when it loads, before
// any weight is read.
#pragma once

#include <torch/types.h>

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace omni::pipelines {

class DtypeSpec {
 public:
  // `auto` for every component.
  DtypeSpec() = default;
  // `dtype` for every component (kept implicit: LoadOptions{.dtype = kBFloat16}).
  DtypeSpec(torch::ScalarType dtype) : all_(dtype) {}  // NOLINT(google-explicit-constructor)

  // Parses the grammar above; ConfigError naming the bad item otherwise.
  static DtypeSpec parse(std::string_view text);
  // "auto", "bfloat16", "bfloat16,vae=float32", …: parse(to_string()) == *this.
  std::string to_string() const;

  // The dtype `component` is loaded in; nullopt: its stored dtype. A VAE
  // takes only a dtype that names it (see above).
  std::optional<torch::ScalarType> for_component(const std::string& component,
                                                 bool is_vae = false) const;
  // ConfigError naming `source` and listing `components` when an override
  // names a component the model does not have.
  void check_components(const std::vector<std::string>& components,
                        const std::string& source) const;
  bool is_auto() const { return !all_ && by_component_.empty(); }

  bool operator==(const DtypeSpec&) const = default;

 private:
  std::optional<torch::ScalarType> all_;
  std::map<std::string, std::optional<torch::ScalarType>> by_component_;
};

// "bfloat16" → kBFloat16 (also bf16, float32/fp32, float16/fp16);
// ConfigError listing the accepted names otherwise.
torch::ScalarType parse_dtype_name(std::string_view name);
// kBFloat16 → "bfloat16".
std::string dtype_name(torch::ScalarType dtype);

}  // namespace omni::pipelines
