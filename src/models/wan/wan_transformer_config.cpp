#include "omni/models/wan/wan_transformer_config.h"

#include <vector>

#include "omni/error.h"
#include "omni/io/json_config.h"

namespace omni::models::wan {

std::array<std::int64_t, 3> WanTransformer3DConfig::rope_split() const {
  const std::int64_t hw = 2 * (attention_head_dim / 6);
  return {attention_head_dim - 2 * hw, hw, hw};
}

WanTransformer3DConfig WanTransformer3DConfig::from_json(const nlohmann::json& json,
                                                         const std::string& source) {
  io::ConfigReader reader(json, source);
  WanTransformer3DConfig c;
  const auto patch = reader.required<std::vector<std::int64_t>>("patch_size");
  OMNI_CHECK(patch.size() == 3, ConfigError, source,
             ": field 'patch_size' must have 3 entries (t, h, w), got ", patch.size());
  c.patch_size = {patch[0], patch[1], patch[2]};
  c.num_attention_heads = reader.required<std::int64_t>("num_attention_heads");
  c.attention_head_dim = reader.required<std::int64_t>("attention_head_dim");
  c.in_channels = reader.required<std::int64_t>("in_channels");
  // diffusers: `out_channels = out_channels or in_channels`.
  OMNI_CHECK(json.contains("out_channels"), ConfigError, source,
             ": missing required field 'out_channels'");
  c.out_channels = reader.optional<std::int64_t>("out_channels", c.in_channels);
  if (c.out_channels == 0) c.out_channels = c.in_channels;
  c.text_dim = reader.required<std::int64_t>("text_dim");
  c.freq_dim = reader.required<std::int64_t>("freq_dim");
  c.ffn_dim = reader.required<std::int64_t>("ffn_dim");
  c.num_layers = reader.required<std::int64_t>("num_layers");
  c.cross_attn_norm = reader.required<bool>("cross_attn_norm");
  const auto qk_norm = reader.nullable<std::string>("qk_norm");
  OMNI_CHECK(qk_norm.has_value(), ConfigError, source,
             ": field 'qk_norm' is null; only \"rms_norm_across_heads\" is implemented");
  c.qk_norm = *qk_norm;
  c.eps = reader.required<double>("eps");
  c.rope_max_seq_len = reader.required<std::int64_t>("rope_max_seq_len");
  c.image_dim = reader.nullable<std::int64_t>("image_dim");
  c.added_kv_proj_dim = reader.nullable<std::int64_t>("added_kv_proj_dim");
  c.pos_embed_seq_len = reader.nullable<std::int64_t>("pos_embed_seq_len");
  reader.finish();
  try {
    c.validate();
  } catch (const ConfigError& e) {
    throw ConfigError(detail::concat(source, ": ", e.what()));
  }
  return c;
}

WanTransformer3DConfig WanTransformer3DConfig::from_file(const std::filesystem::path& config_json) {
  return from_json(io::read_json_file(config_json), config_json.string());
}

void WanTransformer3DConfig::validate() const {
  for (std::size_t i = 0; i < patch_size.size(); ++i)
    OMNI_CHECK(patch_size[i] > 0, ConfigError, "field 'patch_size' entry ", i,
               " must be positive, got ", patch_size[i]);
  auto positive = [](const char* name, std::int64_t value) {
    OMNI_CHECK(value > 0, ConfigError, "field '", name, "' must be positive, got ", value);
  };
  positive("num_attention_heads", num_attention_heads);
  positive("attention_head_dim", attention_head_dim);
  positive("in_channels", in_channels);
  positive("out_channels", out_channels);
  positive("text_dim", text_dim);
  positive("ffn_dim", ffn_dim);
  positive("num_layers", num_layers);
  positive("rope_max_seq_len", rope_max_seq_len);
  // Derived sizes the model is built from (Note [Counting parameters without
  // overflow] bounds the rest).
  std::int64_t product = 0;
  OMNI_CHECK(!__builtin_mul_overflow(num_attention_heads, attention_head_dim, &product),
             ConfigError, "fields 'num_attention_heads' (", num_attention_heads,
             ") × 'attention_head_dim' (", attention_head_dim, ") overflow");
  OMNI_CHECK(!__builtin_mul_overflow(patch_size[0], patch_size[1], &product) &&
                 !__builtin_mul_overflow(product, patch_size[2], &product),
             ConfigError, "field 'patch_size' [", patch_size[0], ", ", patch_size[1], ", ",
             patch_size[2], "] overflows");
  OMNI_CHECK(freq_dim >= 2, ConfigError, "field 'freq_dim' must be at least 2, got ", freq_dim);
  OMNI_CHECK(attention_head_dim % 2 == 0, ConfigError,
             "field 'attention_head_dim' must be even for the rotary embedding, got ",
             attention_head_dim);
  OMNI_CHECK(attention_head_dim >= 6, ConfigError,
             "field 'attention_head_dim' must be at least 6 (RoPE splits it in t/h/w), got ",
             attention_head_dim);
  OMNI_CHECK(eps > 0, ConfigError, "field 'eps' must be positive, got ", eps);
  OMNI_CHECK(qk_norm == "rms_norm_across_heads", ConfigError, "field 'qk_norm' value \"", qk_norm,
             "\" is not implemented (only \"rms_norm_across_heads\")");
  OMNI_CHECK(!image_dim, ConfigError, "field 'image_dim' = ", image_dim.value_or(0),
             ": the image-to-video branch (image embedder) is not implemented; it must be null");
  OMNI_CHECK(!added_kv_proj_dim, ConfigError,
             "field 'added_kv_proj_dim' = ", added_kv_proj_dim.value_or(0),
             ": the image-to-video added key/value projections are not implemented; it must be "
             "null");
  OMNI_CHECK(!pos_embed_seq_len, ConfigError,
             "field 'pos_embed_seq_len' = ", pos_embed_seq_len.value_or(0),
             ": the image embedder's position embedding is not implemented; it must be null");
}

}  // namespace omni::models::wan
