#include "omni/omni.h"

#include <malloc.h>

#include <algorithm>
#include <iostream>
#include <optional>
#include <set>
#include <utility>

#include "engine/torch_errors.h"
#include "omni/device/cpu_threads.h"
#include "omni/engine/inspect.h"
#include "omni/error.h"
#include "omni/io/image_writer.h"
#include "omni/io/safetensors.h"
#include "omni/offload/staging_ring.h"

namespace omni {

// A LoRA planned against its component, and the tensors fused so far.
struct Omni::PlannedLora {
  models::wan::LoraPlan plan;
  std::shared_ptr<torch::nn::Module> module;
  std::set<std::string> fused;
};

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
  OMNI_CHECK(!offload.device_memory_budget || *offload.device_memory_budget > 0, ConfigError,
             "the device memory budget must be positive");
  OMNI_CHECK(offload.prefetch_blocks >= 1 && offload.prefetch_blocks <= 64, ConfigError,
             "prefetch blocks must be in [1, 64], got ", offload.prefetch_blocks);
  for (const auto& lora : loras) lora.validate();
}

offload::PolicyKind EngineArgs::offload_policy() const {
  if (enable_layerwise_offload) return offload::PolicyKind::layerwise;
  if (offload.device_memory_budget) return offload::PolicyKind::budget;
  return enable_cpu_offload ? offload::PolicyKind::model_level : offload::PolicyKind::all_resident;
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

namespace {
// A budget that cannot run the policy is a ConfigError naming the sizes
// before any weight loads: the same arithmetic from the headers
// (omni inspect's device plan). OffloadBackend checks again once loaded.
void check_budget_before_loading(offload::PolicyKind policy, const DevicePlan& plan) {
  for (const auto& mode : plan.modes)
    OMNI_CHECK(mode.kind != policy || mode.runs, ConfigError, mode.why_not);
}
}  // namespace

namespace {
// Plan, then load: from the headers only, one reading for both plans. A
// budget the policy cannot run with is a ConfigError before any weight
// loads; under a host memory budget, returns the host memory plan and puts
// its mapped homes and staging ring into `offload_options` (Note [Mapped
// homes]).
std::optional<offload::HostMemoryPlan> plan_before_loading(
    const EngineArgs& args, offload::PolicyKind policy, bool offload, device::Device& device,
    const pipelines::DtypeSpec& dtype, offload::OffloadOptions& offload_options) {
  const bool plans_host = offload && args.host_memory_budget_bytes && device.supports_offload();
  const bool checks_budget =
      device.supports_offload() && !args.offload_auto &&
      (policy == offload::PolicyKind::budget || policy == offload::PolicyKind::layerwise);
  if (!plans_host && !checks_budget) return std::nullopt;
  InspectOptions inspect_options;
  inspect_options.dtype = dtype;
  if (checks_budget) {
    inspect_options.device_memory_budget_bytes = offload::device_budget(device, args.offload);
    inspect_options.prefetch_blocks = args.offload.prefetch_blocks;
  }
  const auto model_plan = inspect_model(args.model, inspect_options);
  if (checks_budget) check_budget_before_loading(policy, *model_plan.device_plan);
  if (!plans_host) return std::nullopt;
  auto host_plan =
      plan_host_memory(model_plan, args.host_memory_budget_bytes, args.pinned_staging_bytes);
  auto plan = std::make_shared<const offload::HostMemoryPlan>(host_plan);
  std::shared_ptr<offload::StagingRing> ring;
  if (plan->maps_any())
    ring = std::make_shared<offload::StagingRing>(device, args.pinned_staging_bytes);
  offload_options.mapped_homes = {plan, ring};
  return host_plan;
}
}  // namespace

Omni::Omni(EngineArgs args) : args_(std::move(args)), prompt_cache_(args_.prompt_cache_bytes) {
  args_.validate();
  device::apply_default_cpu_threads();  // Note [CPU threads and BLAS]
  device::DeviceOptions options;
  options.sim_memory_bytes = args_.sim_memory_bytes;
  options.sim_link_gbps = args_.sim_link_gbps;
  auto policy = args_.offload_policy();
  const bool offload = args_.offload_auto || policy != offload::PolicyKind::all_resident;
  device_ = device::make_device(device::DeviceSpec::parse(args_.device), offload, options);
  pipelines::LoadOptions load;
  load.dtype = pipelines::DtypeSpec::parse(args_.dtype);
  load.vae_tiling = args_.vae_tiling;
  auto offload_options = args_.offload;
  host_plan_ = plan_before_loading(args_, policy, offload, *device_, load.dtype, offload_options);
  // A LoRA file that is missing or not safetensors fails before the model loads.
  for (const auto& lora : args_.loras) (void)io::read_safetensors_header(lora.path);
  pipeline_ = pipelines::load_pipeline(args_.model, load);
  // Note [Fusing a LoRA]: each LoRA is planned (every key matched, every
  // shape checked) before anything is written, then fused into each
  // tensor's host home as the home is filled, so loading holds no second
  // copy of the weights it changes; tensors without a home are fused in place.
  auto loras = std::make_shared<std::vector<PlannedLora>>(plan_loras());
  if (!loras->empty())
    offload_options.home_filled = [loras](const std::string& component, const std::string& tensor,
                                          torch::Tensor& home) {
      for (auto& p : *loras)
        if (p.plan.summary().component == component && p.plan.changes(tensor)) {
          p.plan.apply(tensor, home);
          p.fused.insert(tensor);
        }
    };
  if (args_.offload_auto && device_->supports_offload()) {
    policy = choose_policy();
    offload_options.device_memory_budget = args_.offload.device_memory_budget;
    offload_options.prefetch_into_spare_memory = true;  // Note [The seed's bound by default]
  }
  if (offload || device_->supports_offload())
    backend_ = std::make_unique<offload::OffloadBackend>(*device_, offload::make_policy(policy),
                                                         offload_options);
  if (backend_) backend_->enable(*pipeline_, pipeline_->components());
  finish_loras(*loras);
  loras->clear();  // the hook fuses nothing more; the LoRA files are unmapped
  release_freed_host_memory();
}

void Omni::add_load_facts(offload::OffloadReport& report) const {
  report.loras = loras_;
  if (!host_plan_) return;
  report.host_plan = *host_plan_;
  report.mapped_host_bytes = host_plan_->mapped_bytes();
  report.staging_host_bytes = host_plan_->maps_any() ? host_plan_->staging_bytes : 0;
}

std::vector<Omni::PlannedLora> Omni::plan_loras() const {
  std::vector<PlannedLora> plans;
  if (args_.loras.empty()) return plans;
  const auto spec = pipeline_->components();
  std::vector<std::string> names;
  for (const auto* list :
       {&spec.dit_modules, &spec.encoder_modules, &spec.vae_modules, &spec.resident_modules})
    names.insert(names.end(), list->begin(), list->end());
  std::string listed;
  for (const auto& n : names) listed += (listed.empty() ? "" : ", ") + n;
  for (const auto& lora : args_.loras) {
    const auto module = std::find(names.begin(), names.end(), lora.component) != names.end()
                            ? offload::find_module(*pipeline_, lora.component)
                            : nullptr;
    OMNI_CHECK(module != nullptr, ConfigError, "LoRA ", lora.path.string(), ": ",
               pipeline_->class_name(), " has no component '", lora.component, "' (it has ", listed,
               ")");
    plans.push_back({models::wan::LoraPlan::make(*module, lora), module, {}});
  }
  return plans;
}

void Omni::finish_loras(std::vector<PlannedLora>& plans) {
  for (auto& p : plans) {
    // Tensors that got no home (no offload, or a component that stays on
    // the device without one) are fused where they are.
    auto params = p.module->named_parameters(/*recurse=*/true);
    for (const auto& name : p.plan.summary().touched)
      if (!p.fused.count(name)) p.plan.apply(name, params[name]);
    const auto& s = p.plan.summary();
    loras_.push_back({.component = s.component,
                      .path = s.path,
                      .scale = s.scale,
                      .style = s.style,
                      .tensors = s.touched.size(),
                      .pairs = s.pairs,
                      .unused_pairs = s.unused_pairs});
    if (s.unused_pairs > 0 && !args_.offload.quiet) {
      std::cerr << "omni: LoRA " << s.path << " on " << s.component << ": " << s.unused_pairs
                << " of " << s.pairs << " updates match no tensor and are unused, e.g.";
      for (const auto& key : s.unused_keys) std::cerr << " '" << key << "'";
      std::cerr << "\n";
    }
  }
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

namespace engine {
[[noreturn]] void rethrow_torch_error(const c10::Error& e) {
  const std::string what = e.what();
  const auto first_line = what.substr(0, what.find('\n'));
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e))
    throw DeviceOutOfMemory("out of device memory during compute: " + first_line);
  if (what.find("PrivateUse1") != std::string::npos)
    throw NonResidentWeightAccess(
        "a computation used a weight that is not resident on the device (it is offloaded); "
        "a component ran without its pre-forward hook: " +
        first_line);
  throw;  // as it was caught, derived type and all
}
}  // namespace engine

GenerateResult Omni::generate(const GenerationRequest& request,
                              const pipelines::ProgressFn& progress) {
  std::vector<GenerateResult> results(1);
  results[0].request = pipeline_->resolve(request);
  run_resolved(results, progress);
  return std::move(results[0]);
}

void Omni::set_lookahead(std::vector<GenerationRequest> requests) {
  lookahead_ = std::move(requests);
}

void Omni::run_resolved(std::vector<GenerateResult>& results,
                        const pipelines::ProgressFn& progress) {
  std::vector<GenerationRequest> requests;
  for (const auto& r : results) requests.push_back(r.request);
  const auto start = std::chrono::steady_clock::now();
  const auto lookahead = std::exchange(lookahead_, {});
  if (backend_) {
    backend_->begin_request();
    backend_->set_schedule(pipeline_->batch_call_schedule(requests));
    const auto encoders = pipeline_->components().encoder_modules;
    for (const auto& next : lookahead) {
      auto calls = pipeline_->call_schedule(next);
      if (pipeline_->prompts_cached(next, prompt_cache_))
        calls.erase(std::remove_if(calls.begin(), calls.end(),
                                   [&](const std::string& call) {
                                     return std::find(encoders.begin(), encoders.end(), call) !=
                                            encoders.end();
                                   }),
                    calls.end());
      backend_->append_schedule(calls);
    }
  }
  pipelines::RunContext context{device_->compute_device(), progress, &prompt_cache_};
  const auto cache_before = prompt_cache_.stats();
  std::vector<pipelines::GenerationOutput> outputs;
  try {
    torch::NoGradGuard no_grad;
    if (requests.size() == 1)
      outputs.push_back(pipeline_->run(requests[0], context));
    else
      outputs = pipeline_->run_batch(requests, context);
  } catch (const c10::Error& e) {
    engine::rethrow_torch_error(e);
  }
  OMNI_INTERNAL_ASSERT(outputs.size() == results.size(), "a batch of ", results.size(),
                       " requests gave ", outputs.size(), " outputs");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const auto cache_after = prompt_cache_.stats();
  offload::OffloadReport report;
  if (backend_) {
    report = backend_->end_request();
    add_load_facts(report);
  } else {
    report.device = device_->name();
    report.strategy = "none";
    report.loras = loras_;
  }
  for (std::size_t i = 0; i < results.size(); ++i) {
    auto& result = results[i];
    result.frames = outputs[i].frames;
    result.fps = outputs[i].fps;
    result.seconds = seconds;
    result.batch_size = results.size();
    result.prompt_cache_hits = cache_after.hits - cache_before.hits;
    result.prompt_cache_misses = cache_after.misses - cache_before.misses;
    result.report = report;
  }
}

namespace {
double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}
}  // namespace

std::vector<BatchOutcome> Omni::generate_batch(const std::vector<GenerationRequest>& requests,
                                               const std::vector<pipelines::ProgressFn>& progress) {
  OMNI_CHECK(progress.empty() || progress.size() == requests.size(), InvalidRequest,
             "generate_batch: ", progress.size(), " progress callbacks for ", requests.size(),
             " requests");
  const auto start = std::chrono::steady_clock::now();
  std::vector<BatchOutcome> outcomes(requests.size());
  std::vector<GenerateResult> results;
  bool one_key = true;
  const auto members = resolve_batch(requests, outcomes, results, one_key, start);
  if (members.size() < 2 || !one_key) {
    for (const auto m : members)
      run_alone(requests[m], progress.empty() ? pipelines::ProgressFn() : progress[m], outcomes[m],
                start);
    lookahead_.clear();  // when no request was valid
    return outcomes;
  }
  run_batch(requests, progress, members, results, outcomes, start);
  lookahead_.clear();
  return outcomes;
}

// Resolves every request first: an invalid one fails alone. Returns the
// indices of those that resolved (their results in `results`, in order);
// `one_key`: they share one batch key.
std::vector<std::size_t> Omni::resolve_batch(const std::vector<GenerationRequest>& requests,
                                             std::vector<BatchOutcome>& outcomes,
                                             std::vector<GenerateResult>& results, bool& one_key,
                                             std::chrono::steady_clock::time_point start) {
  std::vector<std::size_t> members;
  std::optional<std::string> key;
  one_key = true;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    try {
      GenerateResult r;
      r.request = pipeline_->resolve(requests[i]);
      const auto k = pipeline_->batch_key(r.request);
      one_key = one_key && k && (members.empty() || k == key);
      key = k;
      members.push_back(i);
      results.push_back(std::move(r));
    } catch (...) {
      outcomes[i].error = std::current_exception();
      outcomes[i].seconds = seconds_since(start);
    }
  }
  return members;
}

// One request on its own; its outcome is what that gives. (The first such
// run takes the lookahead; later ones have none.)
void Omni::run_alone(const GenerationRequest& request, const pipelines::ProgressFn& progress,
                     BatchOutcome& outcome, std::chrono::steady_clock::time_point start) {
  try {
    outcome.result = generate(request, progress);
  } catch (...) {
    outcome.error = std::current_exception();
  }
  outcome.seconds = seconds_since(start);
}

// The resolved `members` as one run. Per-request cancellation inside it: a
// cancelled request rides along; the run stops once none is left.
void Omni::run_batch(const std::vector<GenerationRequest>& requests,
                     const std::vector<pipelines::ProgressFn>& progress,
                     const std::vector<std::size_t>& members, std::vector<GenerateResult>& results,
                     std::vector<BatchOutcome>& outcomes,
                     std::chrono::steady_clock::time_point start) {
  std::size_t live = members.size();
  const pipelines::ProgressFn batch_progress = [&](int step, int total) {
    for (const auto m : members) {
      const auto& callback = progress[m];
      if (outcomes[m].error || !callback) continue;
      try {
        callback(step, total);
      } catch (const Cancelled&) {
        outcomes[m].error = std::current_exception();
        outcomes[m].seconds = seconds_since(start);
        --live;
      }
    }
    if (live == 0) throw Cancelled("every request of the batch was cancelled");
  };
  try {
    run_resolved(results, progress.empty() ? pipelines::ProgressFn() : batch_progress);
    for (std::size_t k = 0; k < members.size(); ++k) {
      auto& outcome = outcomes[members[k]];
      if (outcome.error) continue;  // cancelled meanwhile: discarded
      outcome.result = std::move(results[k]);
      outcome.seconds = seconds_since(start);
    }
  } catch (const Cancelled&) {
    // From a cancel point inside a step (Note [Cancel points inside a step]):
    // the caller's check stops the run only once every member is cancelled.
    for (const auto m : members)
      if (!outcomes[m].error) {
        outcomes[m].error = std::current_exception();
        outcomes[m].seconds = seconds_since(start);
      }
  } catch (...) {
    // The batch failed as a whole: each request that is still wanted runs
    // alone, and only those that fail alone fail.
    if (live == 0) return;
    for (const auto m : members)
      if (!outcomes[m].error)
        run_alone(requests[m], progress.empty() ? pipelines::ProgressFn() : progress[m],
                  outcomes[m], start);
  }
}

offload::OffloadReport Omni::offload_report() {
  if (backend_) {
    auto r = backend_->report();
    add_load_facts(r);
    return r;
  }
  offload::OffloadReport r;
  r.device = device_->name();
  r.strategy = "none";
  r.loras = loras_;
  return r;
}

}  // namespace omni
