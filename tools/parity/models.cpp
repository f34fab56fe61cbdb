// Runners for the single-model fixtures: WanTransformer3DModel,
// AutoencoderKLWan, UMT5EncoderModel (README §1–§3).
#include "omni/io/checkpoint.h"
#include "omni/models/wan/autoencoder_kl_wan.h"
#include "omni/models/wan/umt5_encoder.h"
#include "omni/models/wan/wan_transformer.h"
#include "parity/parity.h"

namespace omni::parity {

namespace {

// The fixture's own weights, opened strictly (load_state_dict names any
// missing, unexpected or mis-shaped key).
io::Checkpoint weights_of(const Fixture& fixture) {
  const auto path = fixture.dir() / "weights.safetensors";
  if (!std::filesystem::is_regular_file(path))
    throw FixtureError(path.string() + ": missing (the module's state_dict)");
  return io::Checkpoint::open_file(path);
}

torch::Tensor on(const torch::Tensor& t, const RunOptions& options) {
  return t.to(options.device);
}

}  // namespace

Computed run_transformer(const Fixture& fixture, const RunOptions& options) {
  using models::wan::WanTransformer3DConfig;
  using models::wan::WanTransformer3DModel;
  WanTransformer3DModel model(
      WanTransformer3DConfig::from_json(fixture.config(), fixture.config_path().string()));
  model->load_weights(weights_of(fixture));
  model->to(options.device);
  const auto hidden = on(fixture.input("hidden_states"), options);
  const auto text = on(fixture.input("encoder_hidden_states"), options);
  // `sample` is the call with input `timestep`; `sample_X` the same call with
  // input X as the timestep (README §1: sample_timestep_per_token).
  Computed out;
  for (const auto& name : fixture.output_names()) {
    if (name != "sample" && !name.starts_with("sample_")) continue;
    const auto timestep_key = name == "sample" ? std::string("timestep") : name.substr(7);
    if (!fixture.has_input(timestep_key)) continue;
    out[name] = model(hidden, on(fixture.input(timestep_key), options), text);
  }
  return out;
}

Computed run_vae(const Fixture& fixture, const RunOptions& options) {
  using models::wan::AutoencoderKLWan;
  using models::wan::AutoencoderKLWanConfig;
  AutoencoderKLWan vae(
      AutoencoderKLWanConfig::from_json(fixture.config(), fixture.config_path().string()));
  io::load_state_dict(*vae, weights_of(fixture));
  vae->to(options.device);
  Computed out;
  if (fixture.has_input("latents"))
    out["decoded"] = vae->decode(on(fixture.input("latents"), options));
  if (fixture.has_input("video")) {
    const auto posterior = vae->encode(on(fixture.input("video"), options));
    out["encoded_mean"] = posterior.mean;
    out["encoded_logvar"] = posterior.logvar;
  }
  return out;
}

Computed run_umt5(const Fixture& fixture, const RunOptions& options) {
  using models::wan::UMT5Config;
  using models::wan::UMT5EncoderModel;
  UMT5EncoderModel model(UMT5Config::from_json(fixture.config(), fixture.config_path().string()));
  model->load_weights(weights_of(fixture));
  model->to(options.device);
  // Integer inputs are stored as exact float32 (README "File conventions").
  const auto ids = on(fixture.input("input_ids"), options).to(torch::kInt64);
  const auto mask = fixture.has_input("attention_mask")
                        ? on(fixture.input("attention_mask"), options).to(torch::kInt64)
                        : torch::Tensor();
  return {{"last_hidden_state", model(ids, mask)}};
}

}  // namespace omni::parity
