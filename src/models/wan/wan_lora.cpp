#include "omni/models/wan/wan_lora.h"

#include <torch/torch.h>

#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "omni/error.h"
#include "omni/io/safetensors.h"

namespace omni::models::wan {

LoraSpec LoraSpec::parse(std::string_view text) {
  const auto eq = text.find('=');
  OMNI_CHECK(eq != std::string_view::npos, ConfigError, "--lora '", text,
             "': expected COMPONENT=PATH[:SCALE] (e.g. transformer=high.safetensors:0.8)");
  LoraSpec spec;
  spec.component = std::string(text.substr(0, eq));
  auto rest = text.substr(eq + 1);
  // A last ":X" is the scale when X is a number; otherwise it is part of the path.
  if (const auto colon = rest.rfind(':'); colon != std::string_view::npos) {
    const auto tail = std::string(rest.substr(colon + 1));
    char* end = nullptr;
    const double value = tail.empty() ? 0.0 : std::strtod(tail.c_str(), &end);
    if (!tail.empty() && end == tail.c_str() + tail.size()) {
      spec.scale = value;
      rest = rest.substr(0, colon);
    }
  }
  spec.path = std::string(rest);
  spec.validate();
  return spec;
}

void LoraSpec::validate() const {
  OMNI_CHECK(!component.empty(), ConfigError, "LoRA ", path.string(),
             ": the component is empty (COMPONENT=PATH[:SCALE], e.g. transformer=a.safetensors)");
  OMNI_CHECK(!path.empty(), ConfigError, "LoRA for ", component, ": the path is empty");
  OMNI_CHECK(std::isfinite(scale), ConfigError, "LoRA ", path.string(),
             ": the scale must be a finite number, got ", scale);
}

namespace {

struct Rename {
  std::string_view diffusers;
  std::string_view original;
};

// Within `blocks.N.`. diffusers' norm2 is the cross-attention norm (Wan's
// norm3) and its norm3 the feed-forward norm (Wan's norm2).
constexpr Rename kBlockRenames[] = {
    {"attn1.to_q", "self_attn.q"},
    {"attn1.to_k", "self_attn.k"},
    {"attn1.to_v", "self_attn.v"},
    {"attn1.to_out.0", "self_attn.o"},
    {"attn1.norm_q", "self_attn.norm_q"},
    {"attn1.norm_k", "self_attn.norm_k"},
    {"attn2.to_q", "cross_attn.q"},
    {"attn2.to_k", "cross_attn.k"},
    {"attn2.to_v", "cross_attn.v"},
    {"attn2.to_out.0", "cross_attn.o"},
    {"attn2.norm_q", "cross_attn.norm_q"},
    {"attn2.norm_k", "cross_attn.norm_k"},
    {"attn2.add_k_proj", "cross_attn.k_img"},
    {"attn2.add_v_proj", "cross_attn.v_img"},
    {"attn2.norm_added_k", "cross_attn.norm_k_img"},
    {"ffn.net.0.proj", "ffn.0"},
    {"ffn.net.2", "ffn.2"},
    {"norm2", "norm3"},
    {"norm3", "norm2"},
    {"scale_shift_table", "modulation"},
};

constexpr Rename kTopRenames[] = {
    {"condition_embedder.time_proj", "time_projection.1"},
    {"condition_embedder.time_embedder.linear_1", "time_embedding.0"},
    {"condition_embedder.time_embedder.linear_2", "time_embedding.2"},
    {"condition_embedder.text_embedder.linear_1", "text_embedding.0"},
    {"condition_embedder.text_embedder.linear_2", "text_embedding.2"},
    {"condition_embedder.image_embedder.norm1", "img_emb.proj.0"},
    {"condition_embedder.image_embedder.ff.net.0.proj", "img_emb.proj.1"},
    {"condition_embedder.image_embedder.ff.net.2", "img_emb.proj.3"},
    {"condition_embedder.image_embedder.norm2", "img_emb.proj.4"},
    {"proj_out", "head.head"},
    {"scale_shift_table", "head.modulation"},
};

// `path` with its leading `from` (a whole dotted prefix) replaced by `to`.
std::optional<std::string> replace_prefix(std::string_view path, std::string_view from,
                                          std::string_view to) {
  if (path == from) return std::string(to);
  if (path.size() > from.size() && path.starts_with(from) && path[from.size()] == '.')
    return std::string(to) + std::string(path.substr(from.size()));
  return std::nullopt;
}

}  // namespace

std::string wan_original_name(std::string_view path) {
  if (path.starts_with("blocks.")) {
    const auto dot = path.find('.', 7);
    if (dot == std::string_view::npos) return std::string(path);
    const auto head = path.substr(0, dot + 1);  // "blocks.N."
    const auto rest = path.substr(dot + 1);
    for (const auto& r : kBlockRenames)
      if (auto renamed = replace_prefix(rest, r.diffusers, r.original))
        return std::string(head) + *renamed;
    return std::string(path);
  }
  for (const auto& r : kTopRenames)
    if (auto renamed = replace_prefix(path, r.diffusers, r.original)) return *renamed;
  return std::string(path);
}

namespace {

enum class Part { down, up, alpha, diff, diff_b };

struct Suffix {
  std::string_view text;
  Part part;
};
constexpr Suffix kSuffixes[] = {
    {".lora_down.weight", Part::down},
    {".lora_A.weight", Part::down},
    {".lora_up.weight", Part::up},
    {".lora_B.weight", Part::up},
    {".alpha", Part::alpha},
    {".diff_b", Part::diff_b},
    {".diff", Part::diff},
};

// Prefixes that name the model, not a tensor in it; dropped in this order.
constexpr std::string_view kPrefixes[] = {"base_model.model.", "model.diffusion_model.",
                                          "diffusion_model.", "transformer."};

// The keys of one target layer in the file.
struct Keys {
  std::string down, up, alpha, diff, diff_b;
  std::string first_key() const {
    for (const auto* k : {&down, &up, &diff, &diff_b, &alpha})
      if (!k->empty()) return *k;
    return {};
  }
};

enum class Style { original_wan, peft, kohya };
std::string_view to_string(Style style) {
  switch (style) {
    case Style::original_wan:
      return "original-wan";
    case Style::peft:
      return "peft";
    case Style::kohya:
      return "kohya";
  }
  return "?";
}

struct Alias {
  std::string path;  // the module path that owns the weight
  Style style;
};

std::string flattened(std::string_view path) {
  std::string s(path);
  for (auto& c : s)
    if (c == '.') c = '_';
  return s;
}

// Every name a file may use for each weight-owning module path of `module`.
// An alias two paths would claim (only conceivable among flattened names) is
// dropped, so it never silently picks one.
std::map<std::string, Alias> aliases_of(const torch::nn::Module& module) {
  std::map<std::string, Alias> out;
  std::set<std::string> ambiguous;
  const auto add = [&](const std::string& name, const std::string& path, Style style) {
    auto [it, inserted] = out.emplace(name, Alias{path, style});
    if (!inserted && it->second.path != path) ambiguous.insert(name);
  };
  for (const auto& p : module.named_parameters(/*recurse=*/true)) {
    const auto& name = p.key();
    if (!name.ends_with(".weight")) continue;
    const auto path = name.substr(0, name.size() - 7);
    const auto original = wan_original_name(path);
    add(path, path, Style::peft);
    if (original != path) add(original, path, Style::original_wan);
    add("lora_unet_" + flattened(original), path, Style::kohya);
    add("lora_unet_" + flattened(path), path, Style::kohya);
  }
  for (const auto& name : ambiguous) out.erase(name);
  return out;
}

const Alias* find_alias(const std::map<std::string, Alias>& aliases, std::string base) {
  if (auto it = aliases.find(base); it != aliases.end()) return &it->second;
  for (const auto prefix : kPrefixes) {
    if (!base.starts_with(prefix)) continue;
    base.erase(0, prefix.size());
    if (auto it = aliases.find(base); it != aliases.end()) return &it->second;
  }
  return nullptr;
}

std::string shape_string(c10::IntArrayRef shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

LoraPlan LoraPlan::make(const torch::nn::Module& module, const LoraSpec& spec) {
  spec.validate();
  LoraPlan plan;
  plan.file_ = io::SafetensorsFile::open(spec.path);
  const auto& file = plan.file_;
  const std::string label = spec.path.string();
  auto& result = plan.summary_;
  result.component = spec.component;
  result.path = label;
  result.scale = spec.scale;

  // Group the file's keys by the layer they update.
  std::map<std::string, Keys> layers;
  std::vector<std::string> unknown;
  for (const auto& info : file->tensors()) {
    const std::string_view key = info.name;
    bool known = false;
    for (const auto& suffix : kSuffixes) {
      if (!key.ends_with(suffix.text) || key.size() == suffix.text.size()) continue;
      auto& k = layers[std::string(key.substr(0, key.size() - suffix.text.size()))];
      switch (suffix.part) {
        case Part::down:
          k.down = key;
          break;
        case Part::up:
          k.up = key;
          break;
        case Part::alpha:
          k.alpha = key;
          break;
        case Part::diff:
          k.diff = key;
          break;
        case Part::diff_b:
          k.diff_b = key;
          break;
      }
      known = true;
      break;
    }
    if (!known) unknown.push_back(info.name);
  }

  // Match every layer and check every shape; nothing is written here.
  const auto aliases = aliases_of(module);
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& p : module.named_parameters(/*recurse=*/true)) tensors[p.key()] = p.value();
  std::set<Style> styles;
  const auto unused = [&](const std::string& key) {
    ++result.unused_pairs;
    if (result.unused_keys.size() < 5) result.unused_keys.push_back(key);
  };
  const double scale = spec.scale;
  for (const auto& [base, k] : layers) {
    const bool pair = !k.down.empty() || !k.up.empty();
    result.pairs += (pair ? 1 : 0) + (k.diff.empty() ? 0 : 1) + (k.diff_b.empty() ? 0 : 1);
    if (!pair && k.diff.empty() && k.diff_b.empty()) {
      unused(k.alpha);  // an alpha with nothing to scale
      continue;
    }
    const auto* alias = find_alias(aliases, base);
    if (!alias) {
      if (pair) unused(k.down.empty() ? k.up : k.down);
      if (!k.diff.empty()) unused(k.diff);
      if (!k.diff_b.empty()) unused(k.diff_b);
      continue;
    }
    styles.insert(alias->style);
    const auto weight_name = alias->path + ".weight";
    const auto& weight = tensors.at(weight_name);
    if (pair) {
      OMNI_CHECK(!k.down.empty() && !k.up.empty(), FormatError, label, ": '", k.first_key(),
                 "' has no ", k.down.empty() ? "lora_down/lora_A" : "lora_up/lora_B", " partner");
      const c10::IntArrayRef down_shape(file->find(k.down)->shape);
      const c10::IntArrayRef up_shape(file->find(k.up)->shape);
      const std::int64_t rank = down_shape.empty() ? 0 : down_shape[0];
      std::int64_t down_cols = 1, up_cols = 1;
      for (std::size_t i = 1; i < down_shape.size(); ++i) down_cols *= down_shape[i];
      for (std::size_t i = 1; i < up_shape.size(); ++i) up_cols *= up_shape[i];
      const bool fits = weight.dim() >= 2 && down_shape.size() >= 2 && up_shape.size() >= 2 &&
                        rank > 0 && up_cols == rank && up_shape[0] == weight.size(0) &&
                        down_cols * weight.size(0) == weight.numel();
      OMNI_CHECK(fits, FormatError, label, ": '", k.down, "' ", shape_string(down_shape), " and '",
                 k.up, "' ", shape_string(up_shape), " do not fit ", spec.component, "'s '",
                 weight_name, "' ", shape_string(weight.sizes()), " (a LoRA for another model?)");
      double alpha = static_cast<double>(rank);
      if (!k.alpha.empty()) {
        const auto a = file->view(k.alpha);
        OMNI_CHECK(a.numel() == 1, FormatError, label, ": '", k.alpha, "' has ", a.numel(),
                   " elements; an alpha is one number");
        alpha = a.to(torch::kDouble).item<double>();
        OMNI_CHECK(std::isfinite(alpha), FormatError, label, ": '", k.alpha, "' is not finite");
      }
      plan.updates_[weight_name].push_back(
          {.down = k.down, .up = k.up, .diff = {}, .factor = scale * alpha / rank});
    }
    const auto add_diff = [&](const std::string& key, const std::string& target) {
      if (key.empty()) return;
      const auto it = tensors.find(target);
      OMNI_CHECK(it != tensors.end(), FormatError, label, ": '", key, "' updates '", target,
                 "', which ", spec.component, " does not have");
      const c10::IntArrayRef shape(file->find(key)->shape);
      OMNI_CHECK(shape == it->second.sizes(), FormatError, label, ": '", key, "' ",
                 shape_string(shape), " does not fit ", spec.component, "'s '", target, "' ",
                 shape_string(it->second.sizes()));
      plan.updates_[target].push_back({.down = {}, .up = {}, .diff = key, .factor = scale});
    };
    add_diff(k.diff, weight_name);
    add_diff(k.diff_b, alias->path + ".bias");
  }
  for (const auto& key : unknown) {
    ++result.pairs;
    unused(key);
  }
  if (plan.updates_.empty()) {
    std::string sample;
    std::size_t shown = 0;
    for (const auto& info : file->tensors()) {
      if (shown == 3) break;
      sample += (shown++ ? ", '" : "'") + info.name + "'";
    }
    OMNI_CHECK(false, FormatError, label, ": no key matches a tensor of ", spec.component, " (",
               file->tensors().size(), " keys",
               file->tensors().empty() ? "" : std::string(", e.g. ") + sample,
               "); expected LoRA keys such as "
               "'diffusion_model.blocks.0.self_attn.q.lora_down.weight', "
               "'transformer.blocks.0.attn1.to_q.lora_A.weight' or "
               "'lora_unet_blocks_0_self_attn_q.lora_down.weight'");
  }
  for (const auto style : styles) {
    if (!result.style.empty()) result.style += "+";
    result.style += to_string(style);
  }
  for (const auto& [name, list] : plan.updates_) result.touched.push_back(name);
  return plan;
}

void LoraPlan::apply(const std::string& name, torch::Tensor& tensor) const {
  const auto it = updates_.find(name);
  OMNI_INTERNAL_ASSERT(it != updates_.end(), "LoRA ", summary_.path, " has no update for '", name,
                       "'");
  torch::NoGradGuard no_grad;
  const auto read = [&](const std::string& key) {
    return file_->view(key).to(tensor.device(), torch::kFloat);
  };
  // Every update of this file summed in float32, rounded once.
  auto sum = tensor.to(torch::kFloat, /*non_blocking=*/false, /*copy=*/true);
  for (const auto& u : it->second) {
    if (!u.diff.empty()) {
      sum.add_(read(u.diff).reshape(tensor.sizes()), u.factor);
      continue;
    }
    sum.add_(torch::mm(read(u.up).flatten(1), read(u.down).flatten(1))
                 .mul_(u.factor)
                 .reshape(tensor.sizes()));
  }
  tensor.copy_(sum);
}

LoraFusion fuse_lora(torch::nn::Module& module, const LoraSpec& spec) {
  const auto plan = LoraPlan::make(module, spec);
  auto params = module.named_parameters(/*recurse=*/true);
  for (const auto& name : plan.summary().touched) plan.apply(name, params[name]);
  return plan.summary();
}

}  // namespace omni::models::wan
