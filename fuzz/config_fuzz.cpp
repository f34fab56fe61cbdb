// Fuzzes component config files: the bytes as config.json through parse_json
// (what read_json_file uses) and every strict reader omni has for them —
// WanTransformer3DModel, UMT5EncoderModel and AutoencoderKLWan configs, and
// the scheduler factory — then the arithmetic omni inspect runs on a config
// it accepted (parameter_count) and a short schedule. Expected: a
// ConfigError or FormatError naming the field, or a config that validates.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_input.h"
#include "omni/error.h"
#include "omni/io/json_config.h"
#include "omni/models/wan/autoencoder_kl_wan.h"
#include "omni/models/wan/umt5_encoder.h"
#include "omni/models/wan/wan_transformer.h"
#include "omni/schedulers/scheduler.h"

namespace wan = omni::models::wan;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string source = "fuzz/config.json";
  nlohmann::json config;
  try {
    config =
        omni::io::parse_json(std::string_view(reinterpret_cast<const char*>(data), size), source);
  } catch (const omni::FormatError&) {
    return 0;
  }
  omni::fuzz::expect_typed_error([&] {
    const auto c = wan::WanTransformer3DConfig::from_json(config, source);
    (void)wan::WanTransformer3DModelImpl::parameter_count(c);
  });
  omni::fuzz::expect_typed_error([&] {
    const auto c = wan::UMT5Config::from_json(config, source);
    (void)wan::UMT5EncoderModelImpl::parameter_count(c);
  });
  omni::fuzz::expect_typed_error([&] {
    const auto c = wan::AutoencoderKLWanConfig::from_json(config, source);
    (void)wan::AutoencoderKLWanImpl::parameter_count(c);
  });
  omni::fuzz::expect_typed_error([&] {
    const auto scheduler = omni::schedulers::make_scheduler(config, source);
    scheduler->set_timesteps(4);
    scheduler->set_begin_index(0);
  });
  return 0;
}
