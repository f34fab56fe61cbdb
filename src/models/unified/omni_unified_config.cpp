#include "omni/models/unified/omni_unified_config.h"

#include "omni/error.h"
#include "omni/io/json_config.h"

namespace omni::models::unified {

OmniUnifiedTransformerConfig OmniUnifiedTransformerConfig::from_json(const nlohmann::json& json,
                                                                     const std::string& source) {
  OMNI_CHECK(json.is_object(), ConfigError, source, ": expected a JSON object");
  io::ConfigReader reader(json, source);
  OmniUnifiedTransformerConfig c;
  if (json.contains("_class_name")) {
    const auto& name = json.at("_class_name");
    OMNI_CHECK(name.is_string() && name.get<std::string>() == "OmniUnifiedTransformer", ConfigError,
               source, ": field '_class_name' is ", name.dump(),
               "; expected \"OmniUnifiedTransformer\"");
  }
  c.vocab_size = reader.required<std::int64_t>("vocab_size");
  c.max_tokens = reader.required<std::int64_t>("max_tokens");
  c.reasoner_dim = reader.required<std::int64_t>("reasoner_dim");
  c.reasoner_layers = reader.required<std::int64_t>("reasoner_layers");
  c.reasoner_heads = reader.required<std::int64_t>("reasoner_heads");
  c.reasoner_ffn = reader.required<std::int64_t>("reasoner_ffn");
  const auto generator = reader.required<nlohmann::json>("generator");
  OMNI_CHECK(generator.is_object(), ConfigError, source,
             ": field 'generator' must be a WanTransformer3DModel config object, got ",
             generator.type_name());
  reader.finish();
  c.generator = models::wan::WanTransformer3DConfig::from_json(
      generator, detail::concat(source, ": field 'generator'"));
  try {
    c.validate();
  } catch (const ConfigError& e) {
    throw ConfigError(detail::concat(source, ": ", e.what()));
  }
  return c;
}

OmniUnifiedTransformerConfig OmniUnifiedTransformerConfig::from_file(
    const std::filesystem::path& config_json) {
  return from_json(io::read_json_file(config_json), config_json.string());
}

void OmniUnifiedTransformerConfig::validate() const {
  const auto positive = [](const char* name, std::int64_t value) {
    OMNI_CHECK(value > 0, ConfigError, "field '", name, "' must be positive, got ", value);
  };
  positive("vocab_size", vocab_size);
  positive("max_tokens", max_tokens);
  positive("reasoner_dim", reasoner_dim);
  positive("reasoner_layers", reasoner_layers);
  positive("reasoner_heads", reasoner_heads);
  positive("reasoner_ffn", reasoner_ffn);
  OMNI_CHECK(reasoner_dim % reasoner_heads == 0, ConfigError, "field 'reasoner_heads' (",
             reasoner_heads, ") must divide 'reasoner_dim' (", reasoner_dim, ")");
  // The reasoner's largest matrices; the generator's sizes are its own
  // config's business (WanTransformer3DConfig::validate).
  std::int64_t product = 0;
  for (const auto& [name, rows] :
       {std::pair{"vocab_size", vocab_size}, std::pair{"max_tokens", max_tokens},
        std::pair{"reasoner_ffn", reasoner_ffn}})
    OMNI_CHECK(!__builtin_mul_overflow(rows, reasoner_dim, &product) && product <= (1ll << 40),
               ConfigError, "fields '", name, "' (", rows, ") × 'reasoner_dim' (", reasoner_dim,
               ") are too large");
  OMNI_CHECK(reasoner_layers <= 4096, ConfigError,
             "field 'reasoner_layers' must be at most 4096, got ", reasoner_layers);
  try {
    generator.validate();
  } catch (const ConfigError& e) {
    throw ConfigError(detail::concat("field 'generator': ", e.what()));
  }
  OMNI_CHECK(generator.text_dim == reasoner_dim, ConfigError, "field 'generator': 'text_dim' (",
             generator.text_dim, ") must equal 'reasoner_dim' (", reasoner_dim,
             "): the generator cross-attends to the reasoner's hidden states");
}

}  // namespace omni::models::unified
