// omni inspect: plans a model from headers only (see omni/engine/inspect.h).
#include "omni/engine/inspect.h"

#include <algorithm>
#include <set>

#include "omni/error.h"
#include "omni/io/checkpoint.h"
#include "omni/io/hub_cache.h"
#include "omni/io/json_config.h"
#include "omni/models/unified/omni_unified_transformer.h"
#include "omni/models/wan/autoencoder_kl_wan.h"
#include "omni/models/wan/umt5_encoder.h"
#include "omni/models/wan/wan_transformer.h"
#include "omni/offload/backend.h"
#include "omni/offload/host_home.h"
#include "omni/pipelines/pipeline.h"
#include "omni/pipelines/wan_pipeline.h"

namespace fs = std::filesystem;

namespace omni {

namespace {

using offload::Role;

bool starts_with_any(std::string_view s, std::initializer_list<std::string_view> prefixes) {
  return std::any_of(prefixes.begin(), prefixes.end(),
                     [&](std::string_view p) { return s.starts_with(p); });
}

bool contains_any(std::string_view s, std::initializer_list<std::string_view> parts) {
  return std::any_of(parts.begin(), parts.end(),
                     [&](std::string_view p) { return s.find(p) != std::string_view::npos; });
}

// Note [Roles by component name] (inspect.h).
std::optional<Role> role_for(std::string_view name, std::string_view class_name) {
  if (starts_with_any(name, {"tokenizer", "scheduler", "feature_extractor", "image_processor"}) ||
      contains_any(class_name, {"Tokenizer", "Scheduler", "FeatureExtractor", "Processor"}))
    return std::nullopt;
  if (starts_with_any(name, {"transformer", "unet"})) return Role::dit;
  if (starts_with_any(name, {"text_encoder", "image_encoder"})) return Role::encoder;
  if (name.starts_with("vae")) return Role::vae;
  return Role::resident;
}

void add_tensor(ComponentPlan& c, io::DType dtype, std::uint64_t numel, std::uint64_t bytes) {
  ++c.tensors;
  c.parameters += numel;
  c.bytes += bytes;
  auto& d = c.by_dtype[dtype];
  d.parameters += numel;
  d.bytes += bytes;
}

// A tensor as a safetensors header describes it: all inspect needs.
struct HeaderTensor {
  std::string name;
  io::DType dtype;
  std::uint64_t numel;
  std::uint64_t bytes;
};

void add_tensor(ComponentPlan& c, const HeaderTensor& t) {
  add_tensor(c, t.dtype, t.numel, t.bytes);
}

// Appends the header's tensors not seen before (a name counts once).
void add_header_tensors(std::vector<HeaderTensor>& out, const io::SafetensorsHeader& header,
                        std::set<std::string>& seen) {
  for (const auto& t : header.tensors)
    if (seen.insert(t.name).second) out.push_back({t.name, t.dtype, t.numel(), t.nbytes()});
}

// A sharded checkpoint: every shard's header, checked against the weight_map
// the way io::Checkpoint::open_index checks it, without mapping any data.
std::vector<HeaderTensor> read_index(ComponentPlan& c, const fs::path& index_json) {
  const auto json = io::read_json_file(index_json);
  const std::string label = index_json.string();
  OMNI_CHECK(json.is_object() && json.contains("weight_map") && json["weight_map"].is_object(),
             FormatError, label, ": missing 'weight_map' object");
  std::map<std::string, std::vector<std::string>> by_shard;
  for (auto it = json["weight_map"].begin(); it != json["weight_map"].end(); ++it) {
    OMNI_CHECK(it.value().is_string(), FormatError, label, ": shard of '", it.key(),
               "' is not a string");
    const auto shard = it.value().get<std::string>();
    OMNI_CHECK(!shard.empty() && shard.find('/') == std::string::npos &&
                   shard.find("..") == std::string::npos,
               FormatError, label, ": shard name '", shard, "' must be a plain file name");
    by_shard[shard].push_back(it.key());
  }
  OMNI_CHECK(!by_shard.empty(), FormatError, label, ": empty 'weight_map'");
  std::vector<HeaderTensor> tensors;
  std::set<std::string> seen;
  for (const auto& [shard, names] : by_shard) {
    const auto path = index_json.parent_path() / shard;
    OMNI_CHECK(fs::exists(path), FormatError, label, ": shard ", shard, " does not exist");
    const auto header = io::read_safetensors_header(path);
    for (const auto& name : names)
      OMNI_CHECK(header.find(name) != nullptr, FormatError, label, ": tensor '", name,
                 "' is mapped to ", shard, " but that shard does not hold it");
    OMNI_CHECK(header.tensors.size() == names.size(), FormatError, label, ": shard ", shard,
               " holds ", header.tensors.size(), " tensors but the weight_map lists ",
               names.size());
    add_header_tensors(tensors, header, seen);
    c.files.push_back(path);
  }
  return tensors;
}

// The tensors of a component folder's weights (recorded in c.files), chosen
// as io::Checkpoint::open_dir chooses them (diffusers' and transformers'
// file stems first).
std::vector<HeaderTensor> read_weights(ComponentPlan& c, const fs::path& dir) {
  const auto where = io::locate_weights(dir, {"diffusion_pytorch_model", "model"});
  if (!where.index_json.empty()) return read_index(c, where.index_json);
  std::vector<HeaderTensor> tensors;
  std::set<std::string> seen;
  add_header_tensors(tensors, io::read_safetensors_header(where.file), seen);
  c.files.push_back(where.file);
  return tensors;
}

// Note [Tied weights in a checkpoint]
// transformers' UMT5EncoderModel shares one embedding between `shared` and
// `encoder.embed_tokens`, and a checkpoint may store it under both names
// (the reference fixture and the trained tiny-shapes model do). Loaded, it is
// one tensor (io::load_state_dict needs only one of the names), so inspect
// counts it once: the copy stored under the tied name is dropped when its
// owner's name is present with the same dtype and size.
void drop_tied_copies(const std::string& class_name, std::vector<HeaderTensor>& tensors) {
  struct Tie {
    const char* class_name;
    const char* owner;
    const char* copy;
  };
  static const Tie kTies[] = {
      {"UMT5EncoderModel", "shared.weight", "encoder.embed_tokens.weight"},
      {"T5EncoderModel", "shared.weight", "encoder.embed_tokens.weight"},
  };
  const auto find = [&](const std::string& name) {
    return std::find_if(tensors.begin(), tensors.end(),
                        [&](const HeaderTensor& t) { return t.name == name; });
  };
  for (const auto& tie : kTies) {
    if (class_name != tie.class_name) continue;
    const auto owner = find(tie.owner);
    const auto copy = find(tie.copy);
    if (owner == tensors.end() || copy == tensors.end()) continue;
    if (owner->dtype == copy->dtype && owner->numel == copy->numel) tensors.erase(copy);
  }
}

// What config.json implies, for the architectures omni implements: the
// whole component's count and, for OmniUnifiedTransformer, its generator's
// (Note [A split transformer in a directory]).
struct ConfigCounts {
  std::optional<std::uint64_t> whole;
  std::optional<std::uint64_t> generator;
};

ConfigCounts config_parameter_count(const std::string& class_name, const fs::path& config_json) {
  namespace wan = models::wan;
  const auto count = [](std::int64_t n) { return static_cast<std::uint64_t>(n); };
  ConfigCounts counts;
  if (class_name == "WanTransformer3DModel") {
    counts.whole = count(wan::WanTransformer3DModelImpl::parameter_count(
        wan::WanTransformer3DConfig::from_file(config_json)));
  } else if (class_name == "UMT5EncoderModel") {
    counts.whole =
        count(wan::UMT5EncoderModelImpl::parameter_count(wan::UMT5Config::from_file(config_json)));
  } else if (class_name == "AutoencoderKLWan") {
    counts.whole = count(wan::AutoencoderKLWanImpl::parameter_count(
        wan::AutoencoderKLWanConfig::from_file(config_json)));
  } else if (class_name == "OmniUnifiedTransformer") {
    const auto config = models::unified::OmniUnifiedTransformerConfig::from_file(config_json);
    counts.whole = count(models::unified::OmniUnifiedTransformerImpl::parameter_count(config));
    counts.generator = count(wan::WanTransformer3DModelImpl::parameter_count(config.generator));
  }
  return counts;
}

// Sets c.config_parameters (or c.note when config.json cannot be used or
// disagrees with the weights); returns the generator's count of a unified
// transformer.
std::optional<std::uint64_t> check_against_config(ComponentPlan& c, const fs::path& dir) {
  const auto config_json = dir / "config.json";
  if (!fs::exists(config_json)) return std::nullopt;
  ConfigCounts counts;
  try {
    counts = config_parameter_count(c.class_name, config_json);
  } catch (const Error& e) {
    c.note = detail::concat("config.json cannot be used: ", e.what());
    return std::nullopt;
  }
  c.config_parameters = counts.whole;
  if (c.config_parameters && *c.config_parameters != c.parameters)
    c.note = detail::concat("config.json implies ", *c.config_parameters,
                            " parameters but the weights hold ", c.parameters);
  return counts.generator;
}

// Note [A split transformer in a directory]
// OmniUnifiedTransformer keeps its reasoner and generator in one folder, and
// OmniUnifiedPipeline offloads them as mutually exclusive split components:
// the reasoner once per request, then the generator at every step. Planned as
// one DiT, the folder's whole size would count at the peak. So it becomes two
// rows, `transformer.reasoner` and `transformer.generator` (role split, the
// paths the pipeline registers), by the key prefixes of its tensors; each
// row's config count is the generator's WanTransformer3DModel count, or the
// rest of the whole model's.
std::vector<ComponentPlan> split_unified_transformer(
    const ComponentPlan& whole, const std::vector<HeaderTensor>& tensors, const fs::path& folder,
    std::optional<std::uint64_t> generator_config_parameters) {
  static const std::vector<std::string> kParts = {"reasoner", "generator"};
  std::vector<ComponentPlan> rows;
  for (const auto& part : kParts) {
    ComponentPlan row;
    row.name = whole.name + "." + part;
    row.class_name = whole.class_name;
    row.role = Role::split;
    row.files = whole.files;
    row.note = whole.note;
    rows.push_back(std::move(row));
  }
  for (const auto& t : tensors) {
    const auto part = std::find_if(kParts.begin(), kParts.end(), [&](const std::string& p) {
      return t.name.starts_with(p + ".");
    });
    OMNI_CHECK(part != kParts.end(), FormatError, folder.string(), ": tensor '", t.name,
               "' belongs to neither the reasoner nor the generator (expected a 'reasoner.' or "
               "'generator.' prefix)");
    add_tensor(rows[static_cast<std::size_t>(part - kParts.begin())], t);
  }
  if (whole.config_parameters && generator_config_parameters && whole.note.empty()) {
    const auto generator = *generator_config_parameters;
    rows[0].config_parameters = *whole.config_parameters - generator;
    rows[1].config_parameters = generator;
    for (auto& row : rows)
      if (*row.config_parameters != row.parameters)
        row.note = detail::concat("config.json implies ", *row.config_parameters,
                                  " parameters but the weights hold ", row.parameters);
  }
  return rows;
}

// Note [Dtype from the checkpoint] (dtype_spec.h), by the arithmetic of the
// header: the chosen dtype, else the floating-point dtype with most bytes.
void plan_load_dtype(ComponentPlan& c, const pipelines::DtypeSpec& spec) {
  if (!c.role) return;
  std::optional<io::DType> stored;
  for (const auto& [dtype, d] : c.by_dtype) {
    if (!c10::isFloatingType(io::to_scalar_type(dtype))) continue;
    if (!stored || d.bytes > c.by_dtype.at(*stored).bytes ||
        (d.bytes == c.by_dtype.at(*stored).bytes &&
         io::element_size(dtype) > io::element_size(*stored)))
      stored = dtype;
  }
  // A split row ("transformer.reasoner") takes its folder's choice.
  const auto chosen =
      spec.for_component(c.name.substr(0, c.name.find('.')), *c.role == offload::Role::vae);
  c.load_dtype = chosen ? io::from_scalar_type(*chosen) : stored.value_or(io::DType::F32);
  if (!chosen || (stored && *stored == *c.load_dtype && c.by_dtype.size() == 1)) {
    c.load_bytes = c.bytes;
    return;
  }
  c.load_bytes = 0;
  for (const auto& [dtype, d] : c.by_dtype)
    c.load_bytes += c10::isFloatingType(io::to_scalar_type(dtype))
                        ? d.parameters * io::element_size(*c.load_dtype)
                        : d.bytes;
}

// Note [Buffers the model computes]
// A loaded module may hold tensors its checkpoint does not store:
// WanTransformer3DModel builds its RoPE tables (rope.freqs_cos and
// rope.freqs_sin, float32 [rope_max_seq_len, attention_head_dim] each, 1 MiB
// for A14B) at construction. Offload homes and uploads them with the
// weights, so the plan adds them to load_bytes; they are not parameters and
// not stored bytes. (The unified transformer's are not added yet.)
std::vector<HeaderTensor> computed_buffers(const std::string& class_name, const fs::path& dir) {
  const auto config_json = dir / "config.json";
  if (class_name != "WanTransformer3DModel" || !fs::exists(config_json)) return {};
  models::wan::WanTransformer3DConfig config;
  try {
    config = models::wan::WanTransformer3DConfig::from_file(config_json);
  } catch (const Error&) {
    return {};  // check_against_config's note says why
  }
  const auto numel =
      static_cast<std::uint64_t>(config.rope_max_seq_len * config.attention_head_dim);
  return {{"rope.freqs_cos", io::DType::F32, numel, 4 * numel},
          {"rope.freqs_sin", io::DType::F32, numel, 4 * numel}};
}

// Note [Block groups] by the tensor names, in the bytes each tensor loads as.
void plan_block_groups(ComponentPlan& c, const std::vector<HeaderTensor>& tensors,
                       const std::vector<HeaderTensor>& computed) {
  if (!c.role || !c.load_dtype) return;
  const bool converted = c.load_bytes - c.computed_bytes != c.bytes;
  std::vector<std::pair<std::string, std::uint64_t>> sizes;
  for (const auto& t : tensors)
    sizes.emplace_back(t.name, converted && c10::isFloatingType(io::to_scalar_type(t.dtype))
                                   ? t.numel * io::element_size(*c.load_dtype)
                                   : t.bytes);
  for (const auto& t : computed) sizes.emplace_back(t.name, t.bytes);
  const auto size = offload::measure_named_tensors(c.name, *c.role, sizes);
  c.block_bytes = size.block_bytes;
  c.largest_block = size.largest_block;
  c.largest_group = size.largest_group;
}

void finish(ModelPlan& plan, const pipelines::DtypeSpec& spec) {
  std::vector<std::string> weighted;
  for (const auto& c : plan.components)
    if (c.role) weighted.push_back(c.name.substr(0, c.name.find('.')));
  weighted.erase(std::unique(weighted.begin(), weighted.end()), weighted.end());
  spec.check_components(weighted, plan.model);
  plan.dtype = spec.to_string();
  std::vector<std::pair<Role, std::uint64_t>> sizes;
  for (auto& c : plan.components) {
    plan_load_dtype(c, spec);
    c.load_bytes += c.computed_bytes;
    plan.load_bytes += c.load_bytes;
    plan.parameters += c.parameters;
    plan.bytes += c.bytes;
    for (const auto& [dtype, d] : c.by_dtype) {
      plan.by_dtype[dtype].parameters += d.parameters;
      plan.by_dtype[dtype].bytes += d.bytes;
    }
    if (c.role) sizes.emplace_back(*c.role, c.load_bytes);
  }
  plan.planned_peak_with_offload_bytes = offload::planned_model_level_peak(sizes);
  plan.planned_peak_without_offload_bytes = plan.load_bytes;
}

ModelPlan inspect_directory(const std::string& model, const pipelines::DtypeSpec& dtype) {
  const fs::path dir(model);
  const auto index_path = dir / "model_index.json";
  OMNI_CHECK(fs::exists(index_path), FormatError, model,
             ": no model_index.json (expected a diffusers model directory)");
  const auto index = io::read_json_file(index_path);
  OMNI_CHECK(index.is_object() && index.contains("_class_name") && index["_class_name"].is_string(),
             FormatError, index_path.string(), ": missing '_class_name'");
  ModelPlan plan;
  plan.model = model;
  plan.pipeline_class = index["_class_name"].get<std::string>();
  std::map<std::string, std::vector<HeaderTensor>> tensors_of, computed_of;  // by row
  // nlohmann::json keeps object keys sorted, which is also diffusers' order.
  for (auto it = index.begin(); it != index.end(); ++it) {
    const auto& name = it.key();
    const auto& value = it.value();
    // Entries that are not [library, class] pairs are pipeline settings
    // (boundary_ratio, …); [null, null] is a component saved without weights.
    if (name.starts_with("_") || !value.is_array() || value.size() != 2) continue;
    if (value[0].is_null() || value[1].is_null()) continue;
    OMNI_CHECK(value[1].is_string(), FormatError, index_path.string(), ": component '", name,
               "' has a class name that is not a string");
    OMNI_CHECK(name.find('/') == std::string::npos && name.find("..") == std::string::npos,
               FormatError, index_path.string(), ": component name '", name,
               "' must be a plain folder name");
    ComponentPlan c;
    c.name = name;
    c.class_name = value[1].get<std::string>();
    c.role = role_for(name, c.class_name);
    const auto folder = dir / name;
    if (c.role) {
      OMNI_CHECK(fs::is_directory(folder), FormatError, folder.string(),
                 ": component folder missing (model_index.json lists '", name, "')");
      auto tensors = read_weights(c, folder);
      drop_tied_copies(c.class_name, tensors);
      for (const auto& t : tensors) add_tensor(c, t);
      const auto generator_parameters = check_against_config(c, folder);
      if (c.class_name == "OmniUnifiedTransformer") {
        for (auto& row : split_unified_transformer(c, tensors, folder, generator_parameters)) {
          const auto prefix = row.name.substr(row.name.find('.') + 1) + ".";
          for (const auto& t : tensors)
            if (t.name.starts_with(prefix)) tensors_of[row.name].push_back(t);
          plan.components.push_back(std::move(row));
        }
        continue;
      }
      tensors_of[c.name] = std::move(tensors);
      computed_of[c.name] = computed_buffers(c.class_name, folder);
      for (const auto& t : computed_of[c.name]) c.computed_bytes += t.bytes;
    }
    plan.components.push_back(std::move(c));
  }
  finish(plan, dtype);
  for (auto& c : plan.components) plan_block_groups(c, tensors_of[c.name], computed_of[c.name]);
  return plan;
}

// "omni::pipelines::(anonymous namespace)::DiTImpl" → "DiT".
std::string short_class_name(const std::string& name) {
  auto s = name.substr(name.rfind("::") == std::string::npos ? 0 : name.rfind("::") + 2);
  if (s.ends_with("Impl")) s.resize(s.size() - 4);
  return s;
}

ModelPlan inspect_builtin(const std::string& model, const pipelines::DtypeSpec& dtype,
                          std::vector<std::string>& calls) {
  const auto pipeline = pipelines::load_pipeline(model, {.dtype = dtype});
  const auto resolved = offload::resolve_components(*pipeline, pipeline->components(),
                                                    /*require_exclusion_groups=*/false);
  ModelPlan plan;
  plan.model = model;
  plan.pipeline_class = pipeline->class_name();
  plan.builtin = true;
  for (const auto& r : resolved) {
    ComponentPlan c;
    c.name = r.path;
    c.class_name = short_class_name(r.module->name());
    c.role = r.role;
    const auto size = offload::measure_component(r.path, r.role, *r.module);
    c.block_bytes = size.block_bytes;
    c.largest_block = size.largest_block;
    c.largest_group = size.largest_group;
    for (const auto& e : offload::unique_tensors(*r.module))
      add_tensor(c, io::from_scalar_type(e.tensor.scalar_type()),
                 static_cast<std::uint64_t>(e.tensor.numel()),
                 static_cast<std::uint64_t>(e.tensor.numel() * e.tensor.element_size()));
    plan.components.push_back(std::move(c));
  }
  // The pipeline's own child order (text encoder, experts, VAE), not the spec's.
  std::vector<std::string> order;
  for (const auto& child : pipeline->named_children()) order.push_back(child.key());
  auto rank = [&](const ComponentPlan& c) {
    const auto top = c.name.substr(0, c.name.find('.'));
    return std::find(order.begin(), order.end(), top) - order.begin();
  };
  std::stable_sort(plan.components.begin(), plan.components.end(),
                   [&](const auto& a, const auto& b) { return rank(a) < rank(b); });
  finish(plan, dtype);
  pipelines::GenerationRequest probe;
  probe.prompt = "offload plan";
  calls = pipeline->call_schedule(pipeline->resolve(probe));
  return plan;
}

// "text_encoder ×2, transformer ×24, transformer_2 ×56, vae ×1".
std::string summarize_calls(const std::vector<std::string>& calls) {
  std::string out;
  for (std::size_t i = 0; i < calls.size();) {
    std::size_t j = i;
    while (j < calls.size() && calls[j] == calls[i]) ++j;
    out += detail::concat(out.empty() ? "" : ", ", calls[i], " ×", j - i);
    i = j;
  }
  return out;
}

DevicePlan plan_device(const ModelPlan& plan, const std::vector<std::string>& call_names,
                       std::string calls_from, std::uint64_t budget, std::size_t prefetch) {
  DevicePlan d;
  d.budget_bytes = budget;
  d.prefetch_blocks = prefetch;
  d.calls = call_names;
  d.calls_from = std::move(calls_from);
  std::vector<offload::ComponentSize> sizes;
  for (const auto& c : plan.components)
    if (c.role)
      sizes.push_back(
          {c.name, *c.role, c.load_bytes, c.block_bytes, c.largest_block, c.largest_group});
  std::vector<std::size_t> calls;
  for (const auto& name : call_names)
    for (std::size_t i = 0; i < sizes.size(); ++i)
      if (sizes[i].name == name) calls.push_back(i);
  d.modes = offload::estimate_modes(sizes, budget, prefetch, calls);
  try {
    d.choice = offload::choose_offload(sizes, budget, prefetch, calls);
  } catch (const ConfigError& e) {
    d.no_choice = e.what();
    return d;
  }
  for (std::size_t i = 0; i < sizes.size(); ++i)
    d.placement[sizes[i].name] =
        offload::device_placement(d.choice->kind, sizes, i, budget, prefetch, calls);
  return d;
}

// A directory's calls: WanPipeline's default request; other pipelines, one
// call per component in the plan's order (their schedules need the loaded model).
std::vector<std::string> directory_calls(const ModelPlan& plan, const fs::path& dir,
                                         std::string& from) {
  if (plan.pipeline_class == "WanPipeline") {
    from = "a default request (model_index.json, the scheduler config, omni_defaults.json)";
    return pipelines::WanPipeline::default_call_schedule(dir);
  }
  from = detail::concat("one call per component: ", plan.pipeline_class,
                        "'s schedule is known only once it loads");
  std::vector<std::string> calls;
  for (const auto& c : plan.components)
    if (c.role) calls.push_back(c.name);
  return calls;
}

nlohmann::json dtype_json(const std::map<io::DType, DTypeBytes>& by_dtype) {
  auto j = nlohmann::json::object();
  for (const auto& [dtype, d] : by_dtype)
    j[std::string(io::to_string(dtype))] = {{"parameters", d.parameters}, {"bytes", d.bytes}};
  return j;
}

nlohmann::json device_plan_json(const DevicePlan& d) {
  nlohmann::json j;
  j["budget_bytes"] = d.budget_bytes;
  j["prefetch_blocks"] = d.prefetch_blocks;
  j["calls"] = d.calls;
  j["calls_from"] = d.calls_from;
  j["modes"] = nlohmann::json::array();
  for (const auto& m : d.modes)
    j["modes"].push_back({{"mode", std::string(offload::to_string(m.kind))},
                          {"runs", m.runs},
                          {"planned_peak_bytes",
                           m.runs ? nlohmann::json(m.planned_peak_bytes) : nlohmann::json(nullptr)},
                          {"bytes_per_request",
                           m.runs ? nlohmann::json(m.bytes_per_request) : nlohmann::json(nullptr)},
                          {"why_not", m.why_not}});
  if (d.choice)
    j["auto"] = {{"mode", std::string(offload::to_string(d.choice->kind))},
                 {"why", d.choice->why},
                 {"planned_peak_bytes", d.choice->planned_peak_bytes},
                 {"bytes_per_request", d.choice->bytes_per_request},
                 {"placement", d.placement}};
  else
    j["auto"] = {{"mode", nullptr}, {"why", d.no_choice}};
  return j;
}

}  // namespace

offload::HostMemoryPlan plan_host_memory(const ModelPlan& plan,
                                         std::optional<std::uint64_t> budget_bytes,
                                         std::uint64_t staging_bytes) {
  std::vector<offload::HostMemoryPlan::Component> components;
  for (const auto& c : plan.components)
    if (c.role) components.push_back({c.name, *c.role, c.load_bytes, offload::HomeKind::pinned});
  return offload::HostMemoryPlan::make(components, budget_bytes, staging_bytes);
}

const ComponentPlan* ModelPlan::component(std::string_view name) const {
  for (const auto& c : components)
    if (c.name == name) return &c;
  return nullptr;
}

nlohmann::json ModelPlan::to_json() const {
  nlohmann::json j;
  j["model"] = model;
  j["pipeline_class"] = pipeline_class;
  j["builtin"] = builtin;
  j["parameters"] = parameters;
  j["bytes"] = bytes;
  j["by_dtype"] = dtype_json(by_dtype);
  j["dtype"] = dtype;
  j["load_bytes"] = load_bytes;
  j["planned_peak_with_offload_bytes"] = planned_peak_with_offload_bytes;
  j["planned_peak_without_offload_bytes"] = planned_peak_without_offload_bytes;
  j["host_plan"] = host_plan.to_json();
  j["device_plan"] = device_plan ? device_plan_json(*device_plan) : nullptr;
  j["components"] = nlohmann::json::array();
  for (const auto& c : components) {
    nlohmann::json e;
    e["name"] = c.name;
    e["class_name"] = c.class_name;
    e["role"] = c.role ? nlohmann::json(std::string(offload::to_string(*c.role))) : nullptr;
    e["tensors"] = c.tensors;
    e["parameters"] = c.parameters;
    e["bytes"] = c.bytes;
    e["by_dtype"] = dtype_json(c.by_dtype);
    e["load_dtype"] =
        c.load_dtype ? nlohmann::json(std::string(io::to_string(*c.load_dtype))) : nullptr;
    e["load_bytes"] = c.load_bytes;
    e["computed_bytes"] = c.computed_bytes;
    e["block_bytes"] = c.block_bytes;
    e["largest_block_bytes"] = c.largest_block;
    e["largest_group_bytes"] = c.largest_group;
    e["files"] = nlohmann::json::array();
    for (const auto& f : c.files) e["files"].push_back(f.string());
    e["config_parameters"] = c.config_parameters ? nlohmann::json(*c.config_parameters) : nullptr;
    e["note"] = c.note;
    j["components"].push_back(std::move(e));
  }
  return j;
}

ModelPlan inspect_model(const std::string& model, const InspectOptions& options) {
  const auto& dtype = options.dtype;
  OMNI_CHECK(!model.empty(), ConfigError, "model must not be empty");
  if (model.starts_with("example:")) {
    const auto builtins = pipelines::builtin_models();
    std::string known;
    for (const auto& b : builtins) known += (known.empty() ? "" : ", ") + b;
    OMNI_CHECK(std::find(builtins.begin(), builtins.end(), model) != builtins.end(), ConfigError,
               "unknown built-in model '", model, "'; built-ins: ", known);
    std::vector<std::string> calls;
    auto plan = inspect_builtin(model, dtype, calls);
    plan.host_plan =
        plan_host_memory(plan, options.host_memory_budget_bytes, options.pinned_staging_bytes);
    if (options.device_memory_budget_bytes)
      plan.device_plan = plan_device(plan, calls, "a default request",
                                     *options.device_memory_budget_bytes, options.prefetch_blocks);
    return plan;
  }
  return detail::with_typed_filesystem_errors([&] {
    const auto dir = io::resolve_model_dir(model);
    auto plan = inspect_directory(dir.string(), dtype);
    plan.model = model;  // as given: a hub id stays one
    plan.host_plan =
        plan_host_memory(plan, options.host_memory_budget_bytes, options.pinned_staging_bytes);
    if (options.device_memory_budget_bytes) {
      std::string from;
      const auto calls = directory_calls(plan, dir, from);
      plan.device_plan = plan_device(plan, calls, std::move(from),
                                     *options.device_memory_budget_bytes, options.prefetch_blocks);
    }
    return plan;
  });
}

std::string DevicePlan::calls_summary() const {
  return summarize_calls(calls);
}

}  // namespace omni
