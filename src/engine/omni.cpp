#include "omni/omni.h"

#include <iostream>

#include "omni/error.h"
#include "omni/io/image_writer.h"

namespace omni {

torch::ScalarType parse_dtype(const std::string& name) {
  if (name == "float32" || name == "fp32") return torch::kFloat32;
  if (name == "bfloat16" || name == "bf16") return torch::kBFloat16;
  if (name == "float16" || name == "fp16") return torch::kFloat16;
  throw ConfigError("unknown dtype '" + name + "': expected float32, bfloat16 or float16");
}

void EngineArgs::validate() const {
  OMNI_CHECK(!model.empty(), ConfigError, "model must not be empty");
  (void)device::DeviceSpec::parse(device);
  (void)parse_dtype(dtype);
  OMNI_CHECK(sim_memory_bytes > 0, ConfigError, "sim memory must be positive");
  OMNI_CHECK(offload.max_pin_chunk_bytes >= 4096, ConfigError,
             "max pin chunk must be at least 4 KiB");
  OMNI_CHECK(sim_link_gbps >= 0 && sim_link_gbps < 1e6, ConfigError,
             "sim link speed must be 0 (memcpy speed) or a positive number of GB/s, got ",
             sim_link_gbps);
  OMNI_CHECK(!offload.device_memory_budget || *offload.device_memory_budget > 0, ConfigError,
             "the device memory budget must be positive");
  OMNI_CHECK(offload.prefetch_blocks >= 1 && offload.prefetch_blocks <= 64, ConfigError,
             "prefetch blocks must be in [1, 64], got ", offload.prefetch_blocks);
}

offload::PolicyKind EngineArgs::offload_policy() const {
  if (enable_layerwise_offload) return offload::PolicyKind::layerwise;
  if (offload.device_memory_budget) return offload::PolicyKind::budget;
  return enable_cpu_offload ? offload::PolicyKind::model_level : offload::PolicyKind::all_resident;
}

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
  auto policy = args_.offload_policy();
  const bool offload = args_.offload_auto || policy != offload::PolicyKind::all_resident;
  device_ = device::make_device(device::DeviceSpec::parse(args_.device), offload, options);
  pipelines::LoadOptions load;
  load.dtype = parse_dtype(args_.dtype);
  pipeline_ = pipelines::load_pipeline(args_.model, load);
  if (args_.offload_auto && device_->supports_offload()) policy = choose_policy();
  if (offload || device_->supports_offload())
    backend_ = std::make_unique<offload::OffloadBackend>(*device_, offload::make_policy(policy),
                                                         args_.offload);
  if (backend_) backend_->enable(*pipeline_, pipeline_->components());
}

// Note [Choosing an offload mode]: the sizes of the loaded components, the
// budget, and the calls of a request with the model's defaults.
offload::PolicyKind Omni::choose_policy() {
  std::vector<offload::ComponentSize> sizes;
  for (const auto& r : offload::resolve_components(*pipeline_, pipeline_->components(), false))
    sizes.push_back(offload::measure_component(r.path, r.role, *r.module));
  GenerationRequest probe;
  probe.prompt = "offload plan";
  std::vector<std::size_t> calls;
  for (const auto& name : pipeline_->call_schedule(pipeline_->resolve(probe)))
    for (std::size_t i = 0; i < sizes.size(); ++i)
      if (sizes[i].name == name) calls.push_back(i);
  const auto budget = offload::device_budget(*device_, args_.offload);
  choice_ = offload::choose_offload(sizes, budget, args_.offload.prefetch_blocks, calls);
  if (choice_->kind == offload::PolicyKind::budget) args_.offload.device_memory_budget = budget;
  if (!args_.offload.quiet)
    std::cerr << "omni: offload auto: " << offload::to_string(choice_->kind) << ": " << choice_->why
              << "\n";
  return choice_->kind;
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
  if (backend_)
    result.report = backend_->end_request();
  else {
    result.report.device = device_->name();
    result.report.strategy = "none";
  }
  return result;
}

offload::OffloadReport Omni::offload_report() {
  if (backend_) return backend_->report();
  offload::OffloadReport r;
  r.device = device_->name();
  r.strategy = "none";
  return r;
}

}  // namespace omni
