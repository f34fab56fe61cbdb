#include "omni/models/wan/umt5_config.h"

#include "omni/error.h"
#include "omni/io/json_config.h"

namespace omni::models::wan {

UMT5Activation umt5_activation_from_string(const std::string& name, const std::string& field) {
  if (name == "gelu_new" || name == "gelu_pytorch_tanh") return UMT5Activation::kGeluTanh;
  if (name == "gelu") return UMT5Activation::kGelu;
  if (name == "relu") return UMT5Activation::kRelu;
  if (name == "silu" || name == "swish") return UMT5Activation::kSilu;
  throw ConfigError(detail::concat("field '", field, "': activation \"", name,
                                   "\" is not implemented (gelu_new, gelu_pytorch_tanh, gelu, "
                                   "relu, silu)"));
}

UMT5Config UMT5Config::from_json(const nlohmann::json& json, const std::string& source) {
  io::ConfigReader reader(json, source);
  UMT5Config c;
  try {
    const auto model_type = reader.optional<std::string>("model_type", "umt5");
    OMNI_CHECK(model_type == "umt5", ConfigError, "field 'model_type' is \"", model_type,
               "\"; only \"umt5\" is implemented (T5/mT5 share one position bias)");
    c.vocab_size = reader.required<std::int64_t>("vocab_size");
    c.d_model = reader.required<std::int64_t>("d_model");
    c.d_kv = reader.required<std::int64_t>("d_kv");
    c.d_ff = reader.required<std::int64_t>("d_ff");
    c.num_layers = reader.required<std::int64_t>("num_layers");
    c.num_heads = reader.required<std::int64_t>("num_heads");
    c.relative_attention_num_buckets =
        reader.required<std::int64_t>("relative_attention_num_buckets");
    c.relative_attention_max_distance =
        reader.required<std::int64_t>("relative_attention_max_distance");
    c.layer_norm_epsilon = reader.required<double>("layer_norm_epsilon");
    c.feed_forward_proj = reader.required<std::string>("feed_forward_proj");

    // transformers' UMT5Config: "gated-ACT" or "ACT"; "gated-gelu" means gelu_new.
    const auto dash = c.feed_forward_proj.find('-');
    const bool gated = dash != std::string::npos;
    const auto act = gated ? c.feed_forward_proj.substr(dash + 1) : c.feed_forward_proj;
    OMNI_CHECK(!gated || (c.feed_forward_proj.substr(0, dash) == "gated" &&
                          act.find('-') == std::string::npos),
               ConfigError, "field 'feed_forward_proj' value \"", c.feed_forward_proj,
               "\" is not of the form \"gated-ACT\" or \"ACT\"");
    c.is_gated_act = gated;
    c.dense_act_fn = c.feed_forward_proj == "gated-gelu"
                         ? UMT5Activation::kGeluTanh
                         : umt5_activation_from_string(act, "feed_forward_proj");
    if (const auto stated = reader.nullable<std::string>("dense_act_fn"))
      c.dense_act_fn = umt5_activation_from_string(*stated, "dense_act_fn");
    c.is_gated_act = reader.optional<bool>("is_gated_act", c.is_gated_act);

    c.pad_token_id = reader.optional<std::int64_t>("pad_token_id", 0);
    c.eos_token_id = reader.optional<std::int64_t>("eos_token_id", 1);
    c.dropout_rate = reader.optional<double>("dropout_rate", 0.1);
    // Known fields of the saved config that the encoder has no use for: the
    // decoder's, training-time and tokenizer settings, and metadata.
    reader.ignore({"architectures", "classifier_dropout", "decoder_start_token_id", "dtype",
                   "initializer_factor", "is_decoder", "is_encoder_decoder", "num_decoder_layers",
                   "output_past", "scalable_attention", "tie_word_embeddings", "tokenizer_class",
                   "torch_dtype", "transformers_version", "use_cache"});
    c.validate();
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    if (what.rfind(source, 0) == 0) throw;
    throw ConfigError(detail::concat(source, ": ", what));
  }
  reader.finish();
  return c;
}

UMT5Config UMT5Config::from_file(const std::filesystem::path& config_json) {
  return from_json(io::read_json_file(config_json), config_json.string());
}

void UMT5Config::validate() const {
  auto positive = [](const char* name, std::int64_t value) {
    OMNI_CHECK(value > 0, ConfigError, "field '", name, "' must be positive, got ", value);
  };
  positive("vocab_size", vocab_size);
  positive("d_model", d_model);
  positive("d_kv", d_kv);
  positive("d_ff", d_ff);
  positive("num_layers", num_layers);
  positive("num_heads", num_heads);
  positive("relative_attention_max_distance", relative_attention_max_distance);
  std::int64_t inner = 0;
  OMNI_CHECK(!__builtin_mul_overflow(num_heads, d_kv, &inner), ConfigError, "fields 'num_heads' (",
             num_heads, ") × 'd_kv' (", d_kv, ") overflow");
  // Bidirectional buckets: half per direction, and half of those exact, so at
  // least 4 are needed for the logarithmic part to exist.
  OMNI_CHECK(relative_attention_num_buckets >= 4, ConfigError,
             "field 'relative_attention_num_buckets' must be at least 4, got ",
             relative_attention_num_buckets);
  OMNI_CHECK(relative_attention_max_distance > relative_attention_num_buckets / 4, ConfigError,
             "field 'relative_attention_max_distance' (", relative_attention_max_distance,
             ") must exceed the exact-bucket range (", relative_attention_num_buckets / 4, ")");
  OMNI_CHECK(layer_norm_epsilon > 0, ConfigError,
             "field 'layer_norm_epsilon' must be positive, got ", layer_norm_epsilon);
}

}  // namespace omni::models::wan
