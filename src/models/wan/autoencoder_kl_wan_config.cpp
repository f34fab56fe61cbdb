// AutoencoderKLWanConfig: strict parsing, validation and the arithmetic parameter count.
#include <algorithm>

#include "models/wan/parameter_count.h"
#include "omni/error.h"
#include "omni/io/json_config.h"
#include "omni/models/wan/autoencoder_kl_wan.h"

namespace omni::models::wan {

AutoencoderKLWanConfig::AutoencoderKLWanConfig()
    // diffusers' defaults (the 16 channels of the Wan2.1 VAE).
    : latents_mean{-0.7571, -0.7089, -0.9113, 0.1075,  -0.1745, 0.9653,  -0.1517, 1.5508,
                   0.4134,  -0.0715, 0.5517,  -0.3632, -0.1922, -0.9497, 0.2503,  -0.2921},
      latents_std{2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743,
                  3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.9160} {}

namespace {

// diffusers types these `int | None = 4`: absent means the default, null means None.
std::optional<std::int64_t> nullable_with_default(io::ConfigReader& reader,
                                                  const nlohmann::json& json,
                                                  const std::string& key,
                                                  std::optional<std::int64_t> fallback) {
  if (!json.contains(key)) return fallback;
  return reader.nullable<std::int64_t>(key);
}

}  // namespace

AutoencoderKLWanConfig AutoencoderKLWanConfig::from_json(const nlohmann::json& json,
                                                         const std::string& source) {
  io::ConfigReader reader(json, source);
  AutoencoderKLWanConfig c;
  c.base_dim = reader.required<std::int64_t>("base_dim");
  c.decoder_base_dim = reader.nullable<std::int64_t>("decoder_base_dim");
  c.z_dim = reader.required<std::int64_t>("z_dim");
  c.dim_mult = reader.required<std::vector<std::int64_t>>("dim_mult");
  c.num_res_blocks = reader.required<std::int64_t>("num_res_blocks");
  c.attn_scales = reader.optional<std::vector<double>>("attn_scales", c.attn_scales);
  c.temperal_downsample = reader.required<std::vector<bool>>("temperal_downsample");
  c.dropout = reader.optional<double>("dropout", c.dropout);
  c.latents_mean = reader.optional<std::vector<double>>("latents_mean", c.latents_mean);
  c.latents_std = reader.optional<std::vector<double>>("latents_std", c.latents_std);
  c.is_residual = reader.optional<bool>("is_residual", c.is_residual);
  c.in_channels = reader.optional<std::int64_t>("in_channels", c.in_channels);
  c.out_channels = reader.optional<std::int64_t>("out_channels", c.out_channels);
  c.patch_size = reader.nullable<std::int64_t>("patch_size");
  c.scale_factor_temporal =
      nullable_with_default(reader, json, "scale_factor_temporal", c.scale_factor_temporal);
  c.scale_factor_spatial =
      nullable_with_default(reader, json, "scale_factor_spatial", c.scale_factor_spatial);
  c.clip_output = reader.nullable<bool>("clip_output");
  reader.finish();
  c.validate();
  return c;
}

AutoencoderKLWanConfig AutoencoderKLWanConfig::from_file(const std::filesystem::path& config_json) {
  return from_json(io::read_json_file(config_json), config_json.string());
}

std::vector<bool> AutoencoderKLWanConfig::temperal_upsample() const {
  return {temperal_downsample.rbegin(), temperal_downsample.rend()};
}

std::int64_t AutoencoderKLWanConfig::spatial_compression() const {
  return std::int64_t{1} << (dim_mult.size() - 1);
}

std::int64_t AutoencoderKLWanConfig::temporal_compression() const {
  return std::int64_t{1} << std::count(temperal_downsample.begin(), temperal_downsample.end(),
                                       true);
}

void AutoencoderKLWanConfig::validate() const {
  constexpr const char* where = "AutoencoderKLWan config: ";
  OMNI_CHECK(base_dim > 0, ConfigError, where, "'base_dim' must be positive, got ", base_dim);
  OMNI_CHECK(!decoder_base_dim || *decoder_base_dim > 0, ConfigError, where,
             "'decoder_base_dim' must be positive or null");
  OMNI_CHECK(z_dim > 0, ConfigError, where, "'z_dim' must be positive, got ", z_dim);
  OMNI_CHECK(!dim_mult.empty() && dim_mult.size() <= 8, ConfigError, where,
             "'dim_mult' must hold 1 to 8 entries, got ", dim_mult.size());
  for (auto m : dim_mult)
    OMNI_CHECK(m > 0, ConfigError, where, "'dim_mult' entries must be positive, got ", m);
  OMNI_CHECK(num_res_blocks >= 1, ConfigError, where, "'num_res_blocks' must be at least 1, got ",
             num_res_blocks);
  OMNI_CHECK(temperal_downsample.size() == dim_mult.size() - 1, ConfigError, where,
             "'temperal_downsample' must hold one flag per downsampling (len(dim_mult) - 1 = ",
             dim_mult.size() - 1, "), got ", temperal_downsample.size());
  OMNI_CHECK(attn_scales.empty(), ConfigError, where,
             "non-empty 'attn_scales' is not implemented (diffusers' encoder cannot run those "
             "attention blocks with its feature cache either)");
  OMNI_CHECK(dropout >= 0.0 && dropout < 1.0, ConfigError, where, "'dropout' must be in [0, 1)");
  OMNI_CHECK(latents_mean.size() == static_cast<std::size_t>(z_dim), ConfigError, where,
             "'latents_mean' must hold z_dim = ", z_dim, " values, got ", latents_mean.size());
  OMNI_CHECK(latents_std.size() == static_cast<std::size_t>(z_dim), ConfigError, where,
             "'latents_std' must hold z_dim = ", z_dim, " values, got ", latents_std.size());
  OMNI_CHECK(!is_residual, ConfigError, where,
             "'is_residual' = true (the Wan2.2 TI2V residual VAE) is not implemented");
  OMNI_CHECK(!patch_size || *patch_size == 1, ConfigError, where,
             "'patch_size' = ", patch_size.value_or(0),
             " (patchified Wan2.2 VAE) is not implemented");
  OMNI_CHECK(in_channels > 0, ConfigError, where, "'in_channels' must be positive");
  OMNI_CHECK(out_channels > 0, ConfigError, where, "'out_channels' must be positive");
  OMNI_CHECK(!scale_factor_spatial || *scale_factor_spatial == spatial_compression(), ConfigError,
             where, "'scale_factor_spatial' = ", scale_factor_spatial.value_or(0),
             " disagrees with the architecture (", spatial_compression(), " from dim_mult)");
  OMNI_CHECK(!scale_factor_temporal || *scale_factor_temporal == temporal_compression(),
             ConfigError, where, "'scale_factor_temporal' = ", scale_factor_temporal.value_or(0),
             " disagrees with the architecture (", temporal_compression(),
             " from temperal_downsample)");
}

namespace {

// Parameter counts of the blocks, mirroring the module constructors, in N
// (Note [Counting parameters without overflow], parameter_count.h).
template <typename N>
N conv(N in, N out, N kernel_volume) {
  return out * in * kernel_volume + out;
}

template <typename N>
N residual_block(N in, N out) {
  return in + conv<N>(in, out, 27) + out + conv<N>(out, out, 27) +
         (in != out ? conv<N>(in, out, 1) : N(0));
}

template <typename N>
N attention_block(N dim) {
  return dim + conv<N>(dim, 3 * dim, 1) + conv<N>(dim, dim, 1);
}

template <typename N>
N mid_block(N dim) {
  return 2 * residual_block<N>(dim, dim) + attention_block<N>(dim);
}

}  // namespace

std::int64_t AutoencoderKLWanImpl::parameter_count(const AutoencoderKLWanConfig& config) {
  config.validate();
  return internal::count_parameters("AutoencoderKLWan", [&config](auto zero) {
    using N = decltype(zero);
    const auto& mult = config.dim_mult;
    const auto levels = static_cast<std::int64_t>(mult.size());
    const N z = N(config.z_dim);
    const N res_blocks = N(config.num_res_blocks);
    N total = 0;

    // Encoder: dims = base·[1, mult...].
    const N base = N(config.base_dim);
    N dim = base;
    total += conv<N>(N(config.in_channels), dim, 27);
    for (std::int64_t i = 0; i < levels; ++i) {
      const N out = base * N(mult[i]);
      total += residual_block<N>(dim, out) + (res_blocks - 1) * residual_block<N>(out, out);
      dim = out;
      if (i != levels - 1)
        total +=
            conv<N>(dim, dim, 9) + (config.temperal_downsample[i] ? conv<N>(dim, dim, 3) : N(0));
    }
    total += mid_block<N>(dim) + dim + conv<N>(dim, 2 * z, 27);

    total += conv<N>(2 * z, 2 * z, 1) + conv<N>(z, z, 1);  // quant_conv, post_quant_conv

    // Decoder: dims = base·[mult[-1], reversed mult...]; stages after the first take
    // the halved channels of the previous upsampler.
    const N dbase = N(config.decoder_dim());
    const auto upsample = config.temperal_upsample();
    dim = dbase * N(mult.back());
    total += conv<N>(z, dim, 27) + mid_block<N>(dim);
    for (std::int64_t i = 0; i < levels; ++i) {
      const N in = i == 0 ? dim : dim / 2;
      const N out = dbase * N(mult[levels - 1 - i]);
      total += residual_block<N>(in, out) + res_blocks * residual_block<N>(out, out);
      if (i != levels - 1)
        total += conv<N>(out, out / 2, 9) + (upsample[i] ? conv<N>(out, 2 * out, 3) : N(0));
      dim = out;
    }
    total += dim + conv<N>(dim, N(config.out_channels), 27);
    return total;
  });
}

}  // namespace omni::models::wan
