#include "omni/omni.h"

#include <malloc.h>

#include "omni/engine/inspect.h"
#include "omni/error.h"
#include "omni/io/image_writer.h"
#include "omni/offload/staging_ring.h"

namespace omni {

void EngineArgs::validate() const {
  OMNI_CHECK(!model.empty(), ConfigError, "model must not be empty");
  (void)device::DeviceSpec::parse(device);
  (void)pipelines::DtypeSpec::parse(dtype);
  OMNI_CHECK(sim_memory_bytes > 0, ConfigError, "sim memory must be positive");
  OMNI_CHECK(pinned_staging_bytes >= 2 * 4096, ConfigError,
             "pinned staging must be at least 8 KiB (two buffers of a page)");
  OMNI_CHECK(!host_memory_budget_bytes || *host_memory_budget_bytes >= pinned_staging_bytes,
             ConfigError, "host memory budget ",
             device::format_bytes(host_memory_budget_bytes.value_or(0)),
             " cannot hold the pinned staging ring (", device::format_bytes(pinned_staging_bytes),
             "); raise --host-memory-budget or lower --pinned-staging");
  OMNI_CHECK(offload.max_pin_chunk_bytes >= 4096, ConfigError,
             "max pin chunk must be at least 4 KiB");
  OMNI_CHECK(sim_link_gbps >= 0 && sim_link_gbps < 1e6, ConfigError,
             "sim link speed must be 0 (memcpy speed) or a positive number of GB/s, got ",
             sim_link_gbps);
}

namespace {
// Loading constructs each component (its tensors freshly allocated) and then
// points them at the mapped file or the homes (Note [Weights that alias the
// file]); glibc keeps much of what that freed. Hand it back, so that the
// process's anonymous memory is what the homes and the device hold.
void release_freed_host_memory() {
#if defined(__GLIBC__)
  ::malloc_trim(0);
#endif
}
}  // namespace

nlohmann::json GenerateResult::report_json() const {
  auto json = report.to_json();
  json["seconds"] = seconds;
  json["seed"] = request.seed;
  json["prompt_cache"] = {{"hits", prompt_cache_hits},
                          {"misses", prompt_cache_misses},
                          {"text_encoder_ran", text_encoder_ran()}};
  return json;
}

std::vector<std::filesystem::path> GenerateResult::save(const std::filesystem::path& path) const {
  return io::write_frames(path, frames, fps);
}

Omni::Omni(EngineArgs args) : args_(std::move(args)), prompt_cache_(args_.prompt_cache_bytes) {
  args_.validate();
  device::DeviceOptions options;
  options.sim_memory_bytes = args_.sim_memory_bytes;
  options.sim_link_gbps = args_.sim_link_gbps;
  options.faults = args_.faults;
  device_ = device::make_device(device::DeviceSpec::parse(args_.device), args_.enable_cpu_offload,
                                options);
  pipelines::LoadOptions load;
  load.dtype = pipelines::DtypeSpec::parse(args_.dtype);
  load.vae_tiling = args_.vae_tiling;
  auto offload_options = args_.offload;
  if (args_.enable_cpu_offload && args_.host_memory_budget_bytes && device_->supports_offload()) {
    // Plan, then load (Note [Mapped homes]): from the headers only.
    InspectOptions inspect_options;
    inspect_options.dtype = load.dtype;
    const auto model_plan = inspect_model(args_.model, inspect_options);
    host_plan_ =
        plan_host_memory(model_plan, args_.host_memory_budget_bytes, args_.pinned_staging_bytes);
    auto plan = std::make_shared<const offload::HostMemoryPlan>(*host_plan_);
    std::shared_ptr<offload::StagingRing> ring;
    if (plan->maps_any())
      ring = std::make_shared<offload::StagingRing>(*device_, args_.pinned_staging_bytes);
    offload_options.mapped_homes = {plan, ring};
  }
  pipeline_ = pipelines::load_pipeline(args_.model, load);
  if (args_.enable_cpu_offload)
    backend_ = std::make_unique<offload::ModelLevelOffloadBackend>(*device_, offload_options);
  else if (device_->supports_offload())
    backend_ = std::make_unique<offload::AllResidentBackend>(*device_, offload_options);
  if (backend_) backend_->enable(*pipeline_, pipeline_->components());
  release_freed_host_memory();
}

void Omni::add_host_plan(offload::OffloadReport& report) const {
  if (!host_plan_) return;
  report.host_plan = *host_plan_;
  report.mapped_host_bytes = host_plan_->mapped_bytes();
  report.staging_host_bytes = host_plan_->maps_any() ? host_plan_->staging_bytes : 0;
}

Omni::~Omni() {
  if (backend_) backend_->disable();
}

namespace {
// Note [Unusable placeholders] (device.cpp): an operator reading an offloaded
// weight on sim fails inside LibTorch with a PrivateUse1 dispatch error.
[[noreturn]] void translate(const c10::Error& e) {
  const std::string what = e.what();
  if (what.find("PrivateUse1") != std::string::npos)
    throw NonResidentWeightAccess(
        "a computation used a weight that is not resident on the device (it is offloaded); "
        "a component ran without its pre-forward hook: " +
        what.substr(0, what.find('\n')));
  throw;
}
}  // namespace

GenerateResult Omni::generate(const GenerationRequest& request,
                              const pipelines::ProgressFn& progress) {
  GenerateResult result;
  result.request = pipeline_->resolve(request);
  const auto start = std::chrono::steady_clock::now();
  if (backend_) {
    backend_->begin_request();
    backend_->set_schedule(pipeline_->call_schedule(result.request));
  }
  pipelines::RunContext context{device_->compute_device(), progress, &prompt_cache_};
  const auto cache_before = prompt_cache_.stats();
  try {
    torch::NoGradGuard no_grad;
    auto out = pipeline_->run(result.request, context);
    result.frames = out.frames;
    result.fps = out.fps;
  } catch (const c10::Error& e) {
    translate(e);
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const auto cache_after = prompt_cache_.stats();
  result.prompt_cache_hits = cache_after.hits - cache_before.hits;
  result.prompt_cache_misses = cache_after.misses - cache_before.misses;
  if (backend_) {
    result.report = backend_->end_request();
    add_host_plan(result.report);
  } else {
    result.report.device = device_->name();
    result.report.strategy = "none";
  }
  return result;
}

offload::OffloadReport Omni::offload_report() {
  if (backend_) {
    auto r = backend_->report();
    add_host_plan(r);
    return r;
  }
  offload::OffloadReport r;
  r.device = device_->name();
  r.strategy = "none";
  return r;
}

}  // namespace omni
