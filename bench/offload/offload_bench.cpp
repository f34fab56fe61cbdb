#include "bench/offload/offload_bench.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "bench/json_file.h"
#include "bench/offload/metered_device.h"
#include "bench/offload/modeled_compute.h"
#include "bench/offload/profile_pipeline.h"
#include "bench/offload/strategies.h"
#include "device/copy_back.h"
#include "omni/device/device.h"
#include "omni/error.h"
#include "omni/offload/host_home.h"
#include "omni/offload/policy.h"

namespace omni::bench {

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

constexpr std::uint64_t kSimDefaultBudget = 1'000'000'000;  // 1 GB of weights
constexpr std::size_t kPinChunk = 256ull << 20;             // as OffloadOptions' default

constexpr int kStrategies = 8;
const char* kStrategyNames[kStrategies] = {"raw",           "all-resident", "omni",
                                           "omni-streamed", "omni-budget",  "omni-layerwise",
                                           "copy-back",     "accelerate"};
const StrategyKind kStrategyOrder[kStrategies] = {
    StrategyKind::raw,           StrategyKind::all_resident, StrategyKind::omni,
    StrategyKind::omni_streamed, StrategyKind::omni_budget,  StrategyKind::omni_layerwise,
    StrategyKind::copy_back,     StrategyKind::accelerate};

std::string role_name(offload::Role role) {
  return std::string(offload::to_string(role));
}

// /proc/meminfo's MemAvailable; 0 when unknown.
std::uint64_t host_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  std::uint64_t value = 0;
  std::string unit;
  while (in >> key >> value >> unit)
    if (key == "MemAvailable:") return value * 1024;
  return 0;
}

// Resets the process's peak resident set (VmHWM); false when not allowed.
bool reset_rss_peak() {
  std::ofstream out("/proc/self/clear_refs");
  if (!out) return false;
  out << "5";
  out.flush();
  return out.good();
}

std::optional<std::uint64_t> rss_peak_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0) {
      std::istringstream fields(line.substr(6));
      std::uint64_t kib = 0;
      fields >> kib;
      return kib * 1024;
    }
  return std::nullopt;
}

std::string fmt(const char* format, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, value);
  return buf;
}

std::string bytes_text(std::uint64_t bytes) {
  return device::format_bytes(bytes);
}

std::uint64_t median_u64(std::vector<std::uint64_t> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Plan {
  WeightProfile full;
  WeightProfile profile;
  std::unique_ptr<device::Device> device;
  OffloadBenchResult result;
  std::size_t expert_index = 0;
  std::optional<ComputeModel> compute;  // Note [Modeled compute]; none: movement only
  std::vector<std::size_t> calls;       // a modeled request's component calls
};

// --device-memory-budget: a size, or a share of `total` ("60%").
std::uint64_t budget_bytes(const std::string& text, std::uint64_t total) {
  if (!text.empty() && text.back() == '%') {
    double percent = 0;
    std::size_t used = 0;
    try {
      percent = std::stod(text.substr(0, text.size() - 1), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    OMNI_CHECK(used == text.size() - 1 && percent > 0 && percent <= 1000, ConfigError,
               "--device-memory-budget '", text,
               "': expected a size such as 300MiB or a share "
               "of the weights such as 60%");
    return static_cast<std::uint64_t>(percent / 100 * static_cast<double>(total));
  }
  const auto bytes = device::parse_byte_size(text);
  OMNI_CHECK(bytes > 0, ConfigError, "--device-memory-budget must be positive");
  return bytes;
}

// The component calls of one request: the modeled ones, else each component once in order.
std::vector<std::size_t> one_request(const WeightProfile& p,
                                     const std::vector<std::size_t>& calls) {
  if (!calls.empty()) return calls;
  std::vector<std::size_t> order(p.components.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  return order;
}

// The fewest bytes any whole-component eviction order uploads for one
// repeat (enable and `requests` requests) under the budget.
std::uint64_t budget_minimum(const WeightProfile& p, const std::vector<std::size_t>& calls,
                             const OffloadBenchResult& r) {
  std::vector<offload::PolicyState::Entry> entries;
  std::uint64_t fixed = 0;
  for (const auto& c : p.components) {
    const bool swappable = c.role != offload::Role::resident;
    entries.push_back({c.name, c.role, c.bytes(p.dtype), 0, swappable});
    if (!swappable) fixed += entries.back().bytes;
  }
  std::vector<std::size_t> all;
  const auto request = one_request(p, calls);
  for (int q = 0; q < r.requests; ++q) all.insert(all.end(), request.begin(), request.end());
  const std::vector<bool> none(entries.size(), false);
  return fixed +
         offload::plan_evictions(entries, none, all, r.device_memory_budget_bytes).upload_bytes;
}

// The largest block group offload moves (Note [Block groups]), from the shapes alone.
std::uint64_t largest_block_bytes(const WeightProfile& profile) {
  auto shapes = build_shape_pipeline(profile);
  std::uint64_t largest = 0;
  for (std::size_t i = 0; i < shapes->size(); ++i) {
    std::map<std::string, std::uint64_t> groups;
    for (const auto& e : offload::unique_tensors(shapes->component(i)))
      groups[e.group] += static_cast<std::uint64_t>(e.tensor.numel()) * e.tensor.element_size();
    for (const auto& [name, bytes] : groups) largest = std::max(largest, bytes);
  }
  return largest;
}

std::uint64_t pow2_pool_bytes(const WeightProfile& profile) {
  std::uint64_t n = 0;
  const auto element = c10::elementSize(profile.dtype);
  for (const auto& c : profile.components) {
    if (c.role != offload::Role::dit && c.role != offload::Role::encoder) continue;
    for (const auto& t : c.tensors)
      n += std::bit_ceil(
          std::max<std::uint64_t>(static_cast<std::uint64_t>(t.numel()) * element, 4096));
  }
  return n;
}

Plan make_plan(const OffloadBenchConfig& config) {
  config.validate();
  Plan plan;
  plan.full = make_profile(config.profile);
  device::DeviceOptions options;
  options.sim_memory_bytes = device::parse_byte_size(config.sim_memory);
  options.sim_link_gbps = config.sim_link_gbps;
  plan.device = device::make_device(device::DeviceSpec::parse(config.device),
                                    /*offload_enabled=*/true, options);
  OMNI_CHECK(plan.device->supports_offload(), ConfigError, "device ", plan.device->name(),
             " has no memory of its own to move weights to: omni bench offload needs sim or cuda");
  auto& r = plan.result;
  r.simulated = plan.device->is_stand_in();
  r.device = plan.device->name();
  if (config.scale.empty()) {
    if (r.simulated) {
      r.scale = scale_to_fit(plan.full, kSimDefaultBudget);
      r.scale_reason = "default on sim: the largest 1/N that keeps the profile at 1 GB or less";
    } else {
      r.scale = Scale::reciprocal(1);
      r.scale_reason = "default on " + r.device + ": the real sizes";
    }
  } else {
    r.scale = Scale::parse(config.scale);
    r.scale_reason = "--scale";
  }
  plan.profile = plan.full.scaled(r.scale);
  const auto& p = plan.profile;
  r.profile = p.name;
  r.description = p.description;
  r.dtype = std::string(c10::toString(p.dtype));
  r.requests = config.requests;
  r.repeats = config.repeats;
  r.plan_only = config.plan_only;
  r.total_bytes = p.bytes();
  std::uint64_t encoders = 0, largest_dit = 0, statics = 0, largest = 0;
  std::vector<std::size_t> dits;
  for (std::size_t i = 0; i < p.components.size(); ++i) {
    const auto& c = p.components[i];
    const auto bytes = c.bytes(p.dtype);
    ComponentInfo info;
    info.name = c.name;
    info.class_name = c.class_name;
    info.role = role_name(c.role);
    info.parameters = c.parameters();
    info.bytes = bytes;
    info.full_parameters = plan.full.components[i].parameters();
    info.full_bytes = plan.full.components[i].bytes(p.dtype);
    info.tensors = c.tensors.size();
    r.components.push_back(info);
    largest = std::max(largest, bytes);
    if (c.role == offload::Role::dit) {
      dits.push_back(i);
      largest_dit = std::max(largest_dit, bytes);
      r.swappable_bytes += bytes;
    } else if (c.role == offload::Role::encoder) {
      encoders += bytes;
      r.swappable_bytes += bytes;
    } else {
      statics += bytes;
    }
  }
  OMNI_INTERNAL_ASSERT(!dits.empty(), "profile without a DiT");
  plan.expert_index = dits.size() > 1 ? dits[1] : dits[0];
  r.expert = p.components[plan.expert_index].name;
  r.expert_bytes = p.components[plan.expert_index].bytes(p.dtype);
  r.host_available_bytes = host_available_bytes();
  r.device_capacity_bytes = plan.device->memory_stats().capacity_bytes;

  const std::uint64_t exclusive_peak = std::max(encoders, largest_dit) + statics;
  r.model_level_planned_peak_bytes = exclusive_peak;
  r.largest_block_bytes = largest_block_bytes(p);
  r.sim_link_gbps = config.sim_link_gbps;
  if (!r.simulated || config.sim_link_gbps > 0) {
    ComputeModel model;
    model.steps = config.steps;
    model.slowdown = r.simulated ? ComputeModel::kRealLinkGbps / config.sim_link_gbps : 1.0;
    model.scale = r.scale.value;
    plan.compute = model;
    plan.calls = request_calls(p, model);
    r.compute_model = model.describe();
    for (auto i : plan.calls) r.request_calls.push_back(p.components[i].name);
  }
  // What omni-streamed may hold: Note [Streaming model-level offload].
  const std::uint64_t streamed_peak = exclusive_peak + 2 * r.largest_block_bytes;
  for (auto kind : config.strategy_kinds()) {
    auto add = [&](std::string name, std::uint64_t host, std::uint64_t dev) {
      StrategyReport s;
      s.name = std::move(name);
      s.planned_host_bytes = host;
      s.planned_device_bytes = dev;
      s.has_requests = kind != StrategyKind::raw;
      r.strategies.push_back(std::move(s));
    };
    switch (kind) {
      case StrategyKind::raw:
        add("raw-pinned", r.expert_bytes, r.expert_bytes);
        add("raw-pageable", r.expert_bytes, r.expert_bytes);
        break;
      case StrategyKind::all_resident:
        add("all-resident", r.total_bytes, r.total_bytes);
        break;
      case StrategyKind::omni:
        // Homes for every component while enable() runs (the VAE's is dropped after).
        add("omni", r.total_bytes, exclusive_peak);
        break;
      case StrategyKind::omni_streamed:
        add("omni-streamed", r.total_bytes, streamed_peak);
        break;
      case StrategyKind::omni_budget:
        r.device_memory_budget_bytes = budget_bytes(config.device_memory_budget, r.total_bytes);
        r.budget_minimum_h2d_bytes = budget_minimum(p, plan.calls, r);
        add("omni-budget", r.total_bytes, r.device_memory_budget_bytes);
        break;
      case StrategyKind::omni_layerwise:
        r.device_memory_budget_bytes = budget_bytes(config.device_memory_budget, r.total_bytes);
        add("omni-layerwise", r.total_bytes, r.device_memory_budget_bytes);
        break;
      case StrategyKind::copy_back:
        add("copy-back", std::max(r.total_bytes, pow2_pool_bytes(p)), exclusive_peak);
        break;
      case StrategyKind::accelerate:
        add("accelerate", r.total_bytes, largest);
        break;
    }
  }
  r.notes.push_back(
      "omni builds its pinned homes from views of one random buffer (a stand-in for a "
      "checkpoint's mmap'd pages); copy-back and accelerate start from weights materialised in "
      "pageable memory, as their loaders leave them. Host figures count what each strategy "
      "holds for weights, not the source.");
  r.notes.push_back(
      "copy-back's pinned memory comes from a stand-in for torch's CachingHostAllocator "
      "(power-of-two blocks, cached, pinned when the pool grows).");
  r.notes.push_back(
      "pinned and h2d/d2h bytes are metered at the Device interface for every "
      "strategy alike.");
  if (r.simulated)
    r.notes.push_back(
        "on sim, device buffers are cached and reused like the CUDA caching allocator's "
        "(dropped by empty_cache, which copy-back and accelerate call), so malloc page faults do "
        "not pose as device allocation costs.");
  if (r.simulated)
    r.notes.push_back(
        config.sim_link_gbps > 0
            ? detail::concat("SIMULATED: the sim device's memory is host memory; its transfers "
                             "are host memcpy paced at ",
                             config.sim_link_gbps,
                             " GB/s (Note [The sim link]) and compute is a wait slowed by the same "
                             "factor (Note [Modeled compute]).")
            : "SIMULATED: the sim device's memory is host memory and its transfers are host "
              "memcpy; bandwidths are memory-copy speeds, not a link's.");
  if (plan.compute)
    r.notes.push_back(
        r.compute_model +
        "; every strategy's requests run it. omni-streamed may hold the model-level planned "
        "peak + 2 largest blocks (its reserve is the rest of the device).");
  return plan;
}

void check_fits(const Plan& plan, StrategyReport& s) {
  const auto& r = plan.result;
  if (r.device_capacity_bytes > 0 && s.planned_device_bytes > r.device_capacity_bytes) {
    s.status = "skipped";
    s.reason = detail::concat("needs ", bytes_text(s.planned_device_bytes), " of device memory; ",
                              r.device, " has ", bytes_text(r.device_capacity_bytes),
                              " (use a smaller --scale)");
    return;
  }
  const auto available = host_available_bytes();
  if (available == 0) return;
  std::uint64_t need = s.planned_host_bytes;
  if (r.simulated) need += s.planned_device_bytes;  // sim "device" memory is host memory
  if (static_cast<double>(need) > 0.9 * static_cast<double>(available)) {
    s.status = "skipped";
    s.reason = detail::concat("needs about ", bytes_text(need), " of host memory; ",
                              bytes_text(available), " is available (use a smaller --scale)");
  }
}

void touch(const std::vector<torch::Tensor>& probes, torch::Tensor& acc) {
  for (const auto& p : probes) acc = acc + p.reshape({-1}).narrow(0, 0, 1).to(torch::kFloat).sum();
}

std::unique_ptr<Strategy> make_strategy(const StrategyReport& s, device::Device& device) {
  const auto& name = s.name;
  if (name == "omni") return make_omni_strategy(device, OmniMode::whole_components);
  if (name == "omni-streamed")
    return make_omni_strategy(device, OmniMode::streamed, s.planned_device_bytes);
  if (name == "omni-budget")
    return make_omni_strategy(device, OmniMode::budget, s.planned_device_bytes);
  if (name == "omni-layerwise")
    return make_omni_strategy(device, OmniMode::layerwise, s.planned_device_bytes);
  if (name == "all-resident") return make_omni_strategy(device, OmniMode::all_resident);
  if (name == "copy-back") return make_copy_back_strategy(device);
  return make_accelerate_strategy(device);
}

// One request as its component calls with modeled compute: a call whose
// component differs from the last is a phase boundary, timed as a swap (to
// the device idle for strategies that do not stream).
// A phase boundary: `move` (the strategy's enter or call), then the device
// idle; its time and bytes are a swap sample of `request`.
template <typename Move>
void time_swap(const std::string& component, MeteredDevice& meter, device::Device& device,
               RequestSample& request, Move&& move) {
  const auto b = meter.readings();
  const auto t = Clock::now();
  move();
  device.synchronize();
  SwapSample swap;
  swap.component = component;
  swap.seconds = since(t);
  const auto a = meter.readings();
  swap.h2d_bytes = a.h2d_bytes - b.h2d_bytes;
  swap.d2h_bytes = a.d2h_bytes - b.d2h_bytes;
  request.transfer_seconds += swap.seconds;
  request.swaps.push_back(swap);
}

// One request as its component calls with modeled compute: a call whose
// component differs from the last is a phase boundary, timed as a swap,
// except for strategies whose copies go on beside compute.
void run_modeled_request(const Plan& plan, Strategy& strategy, device::Device& device,
                         MeteredDevice& meter, const std::vector<std::vector<GroupRun>>& runs,
                         torch::Tensor& acc, RequestSample& request) {
  std::optional<std::size_t> current;
  for (auto i : plan.calls) {
    if (current != i && !strategy.streams())
      time_swap(plan.profile.components[i].name, meter, device, request, [&] { strategy.call(i); });
    else
      strategy.call(i);
    current = i;
    run_groups(runs[i], acc);
  }
}

void run_repeats(Plan& plan, MeteredDevice& meter, const CheckpointImage& image, StrategyReport& s,
                 std::ostream& progress) {
  const auto& profile = plan.profile;
  device::Device& device = meter;  // caches allocations on sim (metered_device.h)
  const int repeats = plan.result.repeats;
  const int requests = plan.result.requests;
  for (int rep = 0; rep < repeats; ++rep) {
    auto strategy = make_strategy(s, meter);
    auto pipeline = build_pipeline(profile, image, strategy->storage());
    device::copy_back(device).release_cached_memory();
    device.synchronize();
    meter.reset_pinned_peak();
    device.reset_peak();
    const bool rss = reset_rss_peak();
    RepeatSample sample;
    auto before = meter.readings();
    auto start = Clock::now();
    strategy->enable(*pipeline, profile);
    device.synchronize();
    sample.enable_seconds = since(start);
    auto after = meter.readings();
    sample.enable_h2d_bytes = after.h2d_bytes - before.h2d_bytes;
    sample.enable_d2h_bytes = after.d2h_bytes - before.d2h_bytes;
    sample.peak_device_bytes = device.memory_stats().peak_allocated_bytes;
    auto acc = torch::zeros(
        {}, torch::TensorOptions().dtype(torch::kFloat).device(device.compute_device()));
    const auto group_runs = plan.compute ? plan_group_runs(*pipeline, profile, *plan.compute)
                                         : std::vector<std::vector<GroupRun>>();
    for (int q = 0; q < requests; ++q) {
      RequestSample request;
      const auto request_before = meter.readings();
      const auto request_start = Clock::now();
      if (plan.compute) {
        const auto& calls = plan.result.request_calls;
        strategy->begin_request(calls, q + 1 < requests ? calls : std::vector<std::string>());
        run_modeled_request(plan, *strategy, device, meter, group_runs, acc, request);
      } else {
        std::vector<std::string> names;
        for (const auto& c : profile.components) names.push_back(c.name);
        strategy->begin_request(names, q + 1 < requests ? names : std::vector<std::string>());
      }
      for (std::size_t i = 0; !plan.compute && i < pipeline->size(); ++i) {
        time_swap(profile.components[i].name, meter, device, request, [&] { strategy->enter(i); });
        touch(pipeline->probes(i), acc);
      }
      {
        const auto b = meter.readings();
        const auto t = Clock::now();
        strategy->end_request();
        device.synchronize();
        const double seconds = since(t);
        const auto a = meter.readings();
        request.transfer_seconds += seconds;
        if (a.h2d_bytes != b.h2d_bytes || a.d2h_bytes != b.d2h_bytes)
          request.swaps.push_back(
              {"(end of request)", seconds, a.h2d_bytes - b.h2d_bytes, a.d2h_bytes - b.d2h_bytes});
      }
      const float checksum = acc.item<float>();
      OMNI_CHECK(std::isfinite(checksum), InternalError, s.name,
                 ": touching the weights gave a non-finite value");
      request.seconds = since(request_start);
      request.device_timed_seconds = strategy->device_timed_transfer_seconds();
      request.exposed_transfer_seconds =
          strategy->exposed_transfer_seconds().value_or(request.transfer_seconds);
      const auto request_after = meter.readings();
      request.h2d_bytes = request_after.h2d_bytes - request_before.h2d_bytes;
      request.d2h_bytes = request_after.d2h_bytes - request_before.d2h_bytes;
      sample.peak_device_bytes =
          std::max(sample.peak_device_bytes, device.memory_stats().peak_allocated_bytes);
      sample.requests.push_back(std::move(request));
    }
    sample.pinned_peak_bytes =
        std::max(meter.readings().pinned_peak_bytes, strategy->host_peak().pinned);
    sample.pageable_peak_bytes = strategy->host_peak().pageable;
    if (rss) sample.rss_peak_bytes = rss_peak_bytes();
    progress << "  " << s.name << " repeat " << rep + 1 << "/" << repeats << ": enable "
             << fmt("%.3f", sample.enable_seconds) << " s, requests";
    for (const auto& q : sample.requests) progress << " " << fmt("%.3f", q.seconds);
    progress << " s\n";
    s.repeats.push_back(std::move(sample));
    strategy->teardown();
    pipeline.reset();
    strategy.reset();
    device::copy_back(device).release_cached_memory();
    device.synchronize();
  }
}

// The link's ceilings: one expert's bytes in one go from pinned memory (in
// the pieces omni's homes are pinned in) and from pageable memory.
void run_raw(Plan& plan, MeteredDevice& meter, const CheckpointImage& image, StrategyReport& s,
             bool pinned, std::ostream& progress) {
  device::Device& device = meter;  // caches allocations on sim (metered_device.h)
  const auto bytes = static_cast<std::size_t>(plan.result.expert_bytes);
  for (int rep = 0; rep < plan.result.repeats; ++rep) {
    device::copy_back(device).release_cached_memory();
    meter.reset_pinned_peak();
    device.reset_peak();
    const bool rss = reset_rss_peak();
    RepeatSample sample;
    std::unique_ptr<offload::HostRegion> region;
    torch::Tensor pageable;
    const std::byte* src = nullptr;
    auto start = Clock::now();
    if (pinned) {
      bool refused = false;
      region = std::make_unique<offload::HostRegion>(bytes, meter, kPinChunk, true, &refused);
      src = region->data();
    } else {
      pageable = torch::empty({static_cast<std::int64_t>(bytes)}, torch::kUInt8);
      src = static_cast<const std::byte*>(pageable.data_ptr());
    }
    sample.enable_seconds = since(start);  // pinning (or nothing): the cold part
    image.fill(const_cast<std::byte*>(src), bytes);
    auto buffer = meter.allocate(bytes);
    for (int q = 0; q < plan.result.requests; ++q) {
      RequestSample request;
      const auto b = meter.readings();
      const auto t = Clock::now();
      if (pinned) {
        for (const auto& piece : region->pieces())
          meter.copy_to_device(buffer, piece.begin, src + piece.begin, piece.end - piece.begin,
                               piece.pinned);
      } else {
        meter.copy_to_device(buffer, 0, src, bytes, false);
      }
      device.synchronize();
      request.seconds = request.transfer_seconds = since(t);
      const auto a = meter.readings();
      request.h2d_bytes = a.h2d_bytes - b.h2d_bytes;
      request.swaps.push_back({plan.result.expert, request.seconds, request.h2d_bytes, 0});
      sample.requests.push_back(std::move(request));
    }
    sample.peak_device_bytes = device.memory_stats().peak_allocated_bytes;
    sample.pinned_peak_bytes = meter.readings().pinned_peak_bytes;
    sample.pageable_peak_bytes = pinned ? (region->size() - region->pinned_bytes()) : bytes;
    if (rss) sample.rss_peak_bytes = rss_peak_bytes();
    progress << "  " << s.name << " repeat " << rep + 1 << "/" << plan.result.repeats << ": copies";
    for (const auto& q : sample.requests) progress << " " << fmt("%.4f", q.seconds);
    progress << " s\n";
    s.repeats.push_back(std::move(sample));
    device.retire(buffer);
    buffer = torch::Tensor();
    region.reset();
    pageable = torch::Tensor();
    device::copy_back(device).release_cached_memory();
  }
}

void summarize(StrategyReport& s, const OffloadBenchResult& r) {
  if (s.status != "ok" || s.repeats.empty()) return;
  std::vector<double> expert, expert_gbps, request, transfer, exposed, per_swap, device_timed,
      enable, first, cold;
  std::vector<std::uint64_t> h2d, d2h;
  bool all_device_timed = true;
  s.expert_swap_bytes = r.expert_bytes;
  for (const auto& rep : s.repeats) {
    enable.push_back(rep.enable_seconds);
    if (!rep.requests.empty()) {
      first.push_back(rep.requests.front().seconds);
      cold.push_back(rep.enable_seconds + rep.requests.front().seconds);
    }
    for (std::size_t q = 1; q < rep.requests.size(); ++q) {
      const auto& req = rep.requests[q];
      for (const auto& swap : req.swaps)
        if (swap.component == r.expert && swap.h2d_bytes > 0) {
          expert.push_back(swap.seconds);
          if (swap.seconds > 0)
            expert_gbps.push_back(static_cast<double>(r.expert_bytes) / swap.seconds / 1e9);
        }
      request.push_back(req.seconds);
      transfer.push_back(req.transfer_seconds);
      exposed.push_back(req.exposed_transfer_seconds);
      int moving = 0;
      for (const auto& swap : req.swaps)
        if (swap.h2d_bytes + swap.d2h_bytes > 0) ++moving;
      if (moving > 0) per_swap.push_back(req.transfer_seconds / moving);
      if (req.device_timed_seconds)
        device_timed.push_back(*req.device_timed_seconds);
      else
        all_device_timed = false;
      h2d.push_back(req.h2d_bytes);
      d2h.push_back(req.d2h_bytes);
    }
    s.peak_device_bytes = std::max(s.peak_device_bytes, rep.peak_device_bytes);
    s.pinned_peak_bytes = std::max(s.pinned_peak_bytes, rep.pinned_peak_bytes);
    s.pageable_peak_bytes = std::max(s.pageable_peak_bytes, rep.pageable_peak_bytes);
    if (rep.rss_peak_bytes)
      s.rss_peak_bytes = std::max(s.rss_peak_bytes.value_or(0), *rep.rss_peak_bytes);
  }
  // Over all repeats, each starting cold.
  s.h2d_bytes_total = s.d2h_bytes_total = 0;
  for (const auto& rep : s.repeats) {
    s.h2d_bytes_total += rep.enable_h2d_bytes;
    s.d2h_bytes_total += rep.enable_d2h_bytes;
    for (const auto& req : rep.requests) {
      s.h2d_bytes_total += req.h2d_bytes;
      s.d2h_bytes_total += req.d2h_bytes;
    }
  }
  s.expert_swap_seconds = Stats::of(expert);
  s.expert_swap_gbps = Stats::of(expert_gbps);
  s.request_seconds = Stats::of(request);
  s.request_transfer_seconds = Stats::of(transfer);
  s.request_exposed_seconds = Stats::of(exposed);
  s.swap_seconds = Stats::of(per_swap);
  if (all_device_timed && !device_timed.empty())
    s.request_device_timed_seconds = Stats::of(device_timed);
  s.h2d_bytes_per_request = median_u64(h2d);
  s.d2h_bytes_per_request = median_u64(d2h);
  s.enable_seconds = Stats::of(enable);
  s.first_request_seconds = Stats::of(first);
  s.cold_start_seconds = Stats::of(cold);
}

void evaluate_targets(OffloadBenchResult& r) {
  r.targets.clear();
  const auto* omni = r.strategy("omni");
  const auto* raw = r.strategy("raw-pinned");
  const auto* copy_back = r.strategy("copy-back");
  auto ok = [](const StrategyReport* s) { return s != nullptr && s->status == "ok"; };
  {
    TargetCheck t{"omni expert-swap bandwidth vs raw pinned", "n/a", ">= 90%", std::nullopt};
    if (ok(omni) && ok(raw) && omni->expert_swap_seconds.count && raw->expert_swap_seconds.count) {
      const double ratio = raw->expert_swap_seconds.median / omni->expert_swap_seconds.median;
      t.measured = fmt("%.1f%%", 100 * ratio);
      t.pass = ratio >= 0.9;
    }
    r.targets.push_back(t);
  }
  {
    TargetCheck t{"omni device-to-host bytes", "n/a", "0", std::nullopt};
    if (ok(omni)) {
      std::uint64_t d2h = 0;
      for (const auto& rep : omni->repeats) {
        d2h += rep.enable_d2h_bytes;
        for (const auto& q : rep.requests) d2h += q.d2h_bytes;
      }
      t.measured = bytes_text(d2h);
      t.pass = d2h == 0;
    }
    r.targets.push_back(t);
  }
  {
    TargetCheck t{"omni host memory vs swappable weights", "n/a", "<= 1.05x", std::nullopt};
    if (ok(omni) && r.swappable_bytes > 0) {
      const double ratio =
          static_cast<double>(omni->pinned_peak_bytes + omni->pageable_peak_bytes) /
          static_cast<double>(r.swappable_bytes);
      t.measured = fmt("%.3fx", ratio);
      t.pass = ratio <= 1.05;
    }
    r.targets.push_back(t);
  }
  {
    TargetCheck t{"omni transfer time per request vs copy-back", "n/a", "<= 1/3", std::nullopt};
    if (ok(omni) && ok(copy_back) && omni->request_transfer_seconds.count &&
        copy_back->request_transfer_seconds.count) {
      const double ratio =
          omni->request_transfer_seconds.median / copy_back->request_transfer_seconds.median;
      t.measured = fmt("%.3f", ratio);
      t.pass = ratio <= 1.0 / 3.0;
    }
    r.targets.push_back(t);
  }
}

// Note [Streaming model-level offload]: hidden swaps at model-level memory.
void evaluate_streaming_targets(OffloadBenchResult& r) {
  const auto* streamed = r.strategy("omni-streamed");
  if (!streamed) return;
  const auto* whole = r.strategy("omni");
  const auto* resident = r.strategy("all-resident");
  auto ok = [](const StrategyReport* s) { return s != nullptr && s->status == "ok"; };
  const bool modeled = !r.compute_model.empty();
  {
    TargetCheck t{"omni-streamed exposed transfer vs omni", "n/a", "<= 10%", std::nullopt};
    if (ok(streamed) && ok(whole) && streamed->request_exposed_seconds.count &&
        whole->request_exposed_seconds.count && whole->request_exposed_seconds.median > 0) {
      const double ratio =
          streamed->request_exposed_seconds.median / whole->request_exposed_seconds.median;
      t.measured = fmt("%.1f%%", 100 * ratio);
      t.pass = ratio <= 0.10;
    }
    r.targets.push_back(t);
  }
  {
    TargetCheck t{"omni-streamed request time vs all-resident", "n/a", "<= 1.02x", std::nullopt};
    if (modeled && ok(streamed) && ok(resident) && resident->request_seconds.count &&
        streamed->request_seconds.count) {
      const double ratio = streamed->request_seconds.median / resident->request_seconds.median;
      t.measured = fmt("%.3fx", ratio);
      t.pass = ratio <= 1.02;
    }
    r.targets.push_back(t);
  }
  {
    TargetCheck t{"omni-streamed peak vs planned + 2 largest blocks", "n/a", "<= 1", std::nullopt};
    if (ok(streamed)) {
      const auto bound = r.model_level_planned_peak_bytes + 2 * r.largest_block_bytes;
      t.measured = bytes_text(streamed->peak_device_bytes) + " of " + bytes_text(bound);
      t.pass = streamed->peak_device_bytes <= bound;
    }
    r.targets.push_back(t);
  }
  {
    TargetCheck t{"omni-streamed device-to-host bytes", "n/a", "0", std::nullopt};
    if (ok(streamed)) {
      t.measured = bytes_text(streamed->d2h_bytes_total);
      t.pass = streamed->d2h_bytes_total == 0;
    }
    r.targets.push_back(t);
  }
}

// Note [Residency policies]: the fewest bytes a schedule allows.
void evaluate_budget_targets(OffloadBenchResult& r) {
  const auto* budget = r.strategy("omni-budget");
  if (!budget || budget->status != "ok") return;
  const auto repeats = static_cast<std::uint64_t>(budget->repeats.size());
  {
    TargetCheck t{"omni-budget h2d bytes vs the exact minimum", "n/a", "<= 1", std::nullopt};
    const auto minimum = repeats * r.budget_minimum_h2d_bytes;
    t.measured = bytes_text(budget->h2d_bytes_total) + " of " + bytes_text(minimum);
    t.pass = budget->h2d_bytes_total <= minimum;
    r.targets.push_back(t);
  }
  if (r.device_memory_budget_bytes >= r.total_bytes) {
    // One upload per repeat of each component a request calls.
    std::uint64_t called = 0;
    for (const auto& c : r.components)
      if (r.request_calls.empty() || std::find(r.request_calls.begin(), r.request_calls.end(),
                                               c.name) != r.request_calls.end())
        called += c.bytes;
    TargetCheck t{"omni-budget h2d bytes with room for all vs one upload each", "n/a", "= 1",
                  std::nullopt};
    t.measured = bytes_text(budget->h2d_bytes_total) + " of " + bytes_text(repeats * called);
    t.pass = budget->h2d_bytes_total == repeats * called;
    r.targets.push_back(t);
  }
  {
    TargetCheck t{"omni-budget peak vs budget", "n/a", "<= 1", std::nullopt};
    t.measured =
        bytes_text(budget->peak_device_bytes) + " of " + bytes_text(r.device_memory_budget_bytes);
    t.pass = budget->peak_device_bytes <= r.device_memory_budget_bytes;
    r.targets.push_back(t);
  }
}

// Layerwise: all-resident's time at the budget's memory.
void evaluate_layerwise_targets(OffloadBenchResult& r) {
  const auto* layerwise = r.strategy("omni-layerwise");
  if (!layerwise || layerwise->status != "ok") return;
  const auto* resident = r.strategy("all-resident");
  {
    TargetCheck t{"omni-layerwise request time vs all-resident", "n/a", "<= 1.05x", std::nullopt};
    if (!r.compute_model.empty() && resident && resident->status == "ok" &&
        resident->request_seconds.count && layerwise->request_seconds.count) {
      const double ratio = layerwise->request_seconds.median / resident->request_seconds.median;
      t.measured = fmt("%.3fx", ratio);
      t.pass = ratio <= 1.05;
    }
    r.targets.push_back(t);
  }
  {
    TargetCheck t{"omni-layerwise peak vs budget", "n/a", "<= 1", std::nullopt};
    t.measured = bytes_text(layerwise->peak_device_bytes) + " of " +
                 bytes_text(r.device_memory_budget_bytes);
    t.pass = layerwise->peak_device_bytes <= r.device_memory_budget_bytes;
    r.targets.push_back(t);
  }
}

void finish(OffloadBenchResult& r) {
  const auto* raw = r.strategy("raw-pinned");
  for (auto& s : r.strategies) {
    summarize(s, r);
    s.ratio_to_raw_pinned.reset();
    if (raw && raw->status == "ok" && s.status == "ok" && raw->expert_swap_seconds.count &&
        s.expert_swap_seconds.count && s.expert_swap_seconds.median > 0)
      s.ratio_to_raw_pinned = raw->expert_swap_seconds.median / s.expert_swap_seconds.median;
  }
  evaluate_targets(r);
  evaluate_streaming_targets(r);
  evaluate_budget_targets(r);
  evaluate_layerwise_targets(r);
}

}  // namespace

std::string_view to_string(StrategyKind kind) {
  switch (kind) {
    case StrategyKind::raw:
      return "raw";
    case StrategyKind::all_resident:
      return "all-resident";
    case StrategyKind::omni:
      return "omni";
    case StrategyKind::omni_streamed:
      return "omni-streamed";
    case StrategyKind::omni_budget:
      return "omni-budget";
    case StrategyKind::omni_layerwise:
      return "omni-layerwise";
    case StrategyKind::copy_back:
      return "copy-back";
    case StrategyKind::accelerate:
      return "accelerate";
  }
  return "?";
}

void OffloadBenchConfig::validate() const {
  OMNI_CHECK(requests >= 2 && requests <= 1000, ConfigError,
             "--requests must be in [2, 1000] (the first request is the cold one), got ", requests);
  OMNI_CHECK(repeats >= 1 && repeats <= 100, ConfigError, "--repeats must be in [1, 100], got ",
             repeats);
  OMNI_CHECK(!strategies.empty(), ConfigError, "--strategies is empty");
  (void)strategy_kinds();
  if (!scale.empty()) (void)Scale::parse(scale);
  (void)device::parse_byte_size(sim_memory);
  (void)device::DeviceSpec::parse(device);
  OMNI_CHECK(sim_link_gbps >= 0 && sim_link_gbps < 1e6, ConfigError,
             "--sim-link-gbps must be 0 (memcpy speed) or a positive number of GB/s, got ",
             sim_link_gbps);
  OMNI_CHECK(steps >= 1 && steps <= 1000, ConfigError, "--steps must be in [1, 1000], got ", steps);
  (void)budget_bytes(device_memory_budget, 1);
}

std::vector<StrategyKind> OffloadBenchConfig::strategy_kinds() const {
  bool selected[kStrategies] = {};
  for (const auto& name : strategies) {
    bool known = false;
    for (int i = 0; i < kStrategies; ++i)
      if (name == kStrategyNames[i]) selected[i] = known = true;
    OMNI_CHECK(
        known, ConfigError, "unknown strategy '", name,
        "' in --strategies; known: all-resident, omni, omni-streamed, omni-budget, omni-layerwise, "
        "copy-back, "
        "accelerate, raw");
  }
  std::vector<StrategyKind> out;
  for (int i = 0; i < kStrategies; ++i)
    if (selected[i]) out.push_back(kStrategyOrder[i]);
  return out;
}

Stats Stats::of(std::vector<double> samples) {
  Stats s;
  s.count = samples.size();
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  const auto n = samples.size();
  s.median = n % 2 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
  s.min = samples.front();
  s.max = samples.back();
  return s;
}

nlohmann::json Stats::to_json() const {
  if (count == 0) return nullptr;
  return {{"median", median}, {"min", min}, {"max", max}, {"count", count}};
}

nlohmann::json StrategyReport::to_json() const {
  nlohmann::json j;
  j["name"] = name;
  j["status"] = status;
  if (!reason.empty()) j["reason"] = reason;
  j["planned_host_bytes"] = planned_host_bytes;
  j["planned_device_bytes"] = planned_device_bytes;
  if (status != "ok" || repeats.empty()) return j;
  j["expert_swap"] = {
      {"bytes", expert_swap_bytes},
      {"seconds", expert_swap_seconds.to_json()},
      {"gbps", expert_swap_gbps.to_json()},
      {"ratio_to_raw_pinned",
       ratio_to_raw_pinned ? nlohmann::json(*ratio_to_raw_pinned) : nlohmann::json(nullptr)}};
  if (has_requests) {
    j["per_request"] = {{"seconds", request_seconds.to_json()},
                        {"transfer_seconds", request_transfer_seconds.to_json()},
                        {"exposed_transfer_seconds", request_exposed_seconds.to_json()},
                        {"device_timed_transfer_seconds",
                         request_device_timed_seconds ? request_device_timed_seconds->to_json()
                                                      : nlohmann::json(nullptr)},
                        {"h2d_bytes", h2d_bytes_per_request},
                        {"d2h_bytes", d2h_bytes_per_request}};
    j["per_swap_seconds"] = swap_seconds.to_json();
  } else {
    j["per_request"] = nullptr;
    j["per_swap_seconds"] = expert_swap_seconds.to_json();
  }
  j["h2d_bytes"] = h2d_bytes_total;
  j["d2h_bytes"] = d2h_bytes_total;
  j["peak_device_bytes"] = peak_device_bytes;
  j["pinned_host_bytes_peak"] = pinned_peak_bytes;
  j["pageable_host_bytes_peak"] = pageable_peak_bytes;
  j["host_rss_peak_bytes"] = rss_peak_bytes ? nlohmann::json(*rss_peak_bytes) : nullptr;
  j["cold_start"] = {{"enable_seconds", enable_seconds.to_json()},
                     {"first_request_seconds", first_request_seconds.to_json()},
                     {"seconds", cold_start_seconds.to_json()}};
  auto& reps = j["repeats"] = nlohmann::json::array();
  for (const auto& rep : repeats) {
    nlohmann::json jr;
    jr["enable_seconds"] = rep.enable_seconds;
    jr["enable_h2d_bytes"] = rep.enable_h2d_bytes;
    jr["enable_d2h_bytes"] = rep.enable_d2h_bytes;
    jr["peak_device_bytes"] = rep.peak_device_bytes;
    jr["pinned_host_bytes_peak"] = rep.pinned_peak_bytes;
    jr["pageable_host_bytes_peak"] = rep.pageable_peak_bytes;
    auto& reqs = jr["requests"] = nlohmann::json::array();
    for (const auto& q : rep.requests) {
      nlohmann::json jq = {{"seconds", q.seconds},
                           {"transfer_seconds", q.transfer_seconds},
                           {"exposed_transfer_seconds", q.exposed_transfer_seconds},
                           {"h2d_bytes", q.h2d_bytes},
                           {"d2h_bytes", q.d2h_bytes}};
      if (q.device_timed_seconds) jq["device_timed_transfer_seconds"] = *q.device_timed_seconds;
      auto& swaps = jq["swaps"] = nlohmann::json::array();
      for (const auto& w : q.swaps)
        swaps.push_back({{"component", w.component},
                         {"seconds", w.seconds},
                         {"h2d_bytes", w.h2d_bytes},
                         {"d2h_bytes", w.d2h_bytes}});
      reqs.push_back(std::move(jq));
    }
    reps.push_back(std::move(jr));
  }
  return j;
}

const StrategyReport* OffloadBenchResult::strategy(std::string_view name) const {
  for (const auto& s : strategies)
    if (s.name == name) return &s;
  return nullptr;
}

nlohmann::json OffloadBenchResult::to_json() const {
  nlohmann::json j;
  j["benchmark"] = "offload";
  j["complete"] = complete;
  j["plan_only"] = plan_only;
  j["simulated"] = simulated;
  j["device"] = device;
  j["profile"] = profile;
  j["description"] = description;
  j["dtype"] = dtype;
  j["scale"] = {{"value", scale.value}, {"text", scale.text}, {"reason", scale_reason}};
  j["requests"] = requests;
  j["repeats"] = repeats;
  j["total_bytes"] = total_bytes;
  j["swappable_bytes"] = swappable_bytes;
  j["expert_swap"] = {{"component", expert}, {"bytes", expert_bytes}};
  j["model_level_planned_peak_bytes"] = model_level_planned_peak_bytes;
  if (device_memory_budget_bytes > 0) {
    j["device_memory_budget_bytes"] = device_memory_budget_bytes;
    j["budget_minimum_h2d_bytes_per_repeat"] = budget_minimum_h2d_bytes;
  }
  j["largest_block_bytes"] = largest_block_bytes;
  j["sim_link_gbps"] = sim_link_gbps;
  j["compute_model"] =
      compute_model.empty() ? nlohmann::json(nullptr) : nlohmann::json(compute_model);
  j["request_calls"] = request_calls;
  j["host_available_bytes"] = host_available_bytes;
  j["device_capacity_bytes"] = device_capacity_bytes;
  auto& schedule = j["schedule"] = nlohmann::json::array();
  auto& comps = j["components"] = nlohmann::json::array();
  for (const auto& c : components) {
    schedule.push_back(c.name);
    comps.push_back({{"name", c.name},
                     {"class_name", c.class_name},
                     {"role", c.role},
                     {"parameters", c.parameters},
                     {"bytes", c.bytes},
                     {"tensors", c.tensors},
                     {"full_scale_parameters", c.full_parameters},
                     {"full_scale_bytes", c.full_bytes}});
  }
  auto& strats = j["strategies"] = nlohmann::json::array();
  for (const auto& s : strategies) strats.push_back(s.to_json());
  auto& targets_json = j["targets"] = nlohmann::json::array();
  for (const auto& t : targets)
    targets_json.push_back({{"name", t.name},
                            {"measured", t.measured},
                            {"target", t.target},
                            {"pass", t.pass ? nlohmann::json(*t.pass) : nlohmann::json(nullptr)},
                            {"meaningful", !simulated}});
  j["notes"] = notes;
  return j;
}

std::string OffloadBenchResult::to_table() const {
  std::ostringstream out;
  out << "omni bench offload — " << profile << " (" << description << "), " << dtype << "\n";
  out << "  scale " << scale.text << " (" << scale_reason << "): " << bytes_text(total_bytes)
      << " of weights";
  std::uint64_t full = 0;
  for (const auto& c : components) full += c.full_bytes;
  out << " (real size " << bytes_text(full) << ")\n";
  out << "  device " << device;
  if (simulated)
    out << " — SIMULATED stand-in: its memory is host memory and its transfers are host memcpy;"
           "\n  every figure below is a memory-copy speed, not a link's";
  out << "\n  components:";
  for (const auto& c : components)
    out << "\n    " << c.name << " " << c.class_name << " (" << c.role
        << "): " << bytes_text(c.bytes) << " in " << c.tensors << " tensors, "
        << fmt("%.3f", static_cast<double>(c.parameters) / 1e9) << " B parameters at this scale";
  out << "\n  schedule: " << requests << " requests x " << repeats << " repeats; a request runs";
  for (std::size_t i = 0; i < components.size(); ++i)
    out << (i ? " -> " : " ") << components[i].name;
  out << "\n  expert swap: the phase boundary before " << expert << " (" << bytes_text(expert_bytes)
      << "); raw = one copy of those bytes\n";
  out << "  figures: median [min-max] over the warm requests (2nd onward) of every repeat\n";
  out << "  model-level planned peak " << bytes_text(model_level_planned_peak_bytes)
      << ", largest block " << bytes_text(largest_block_bytes) << "\n";
  if (!compute_model.empty())
    out << "  " << compute_model << "; a request makes " << request_calls.size()
        << " component calls\n";
  if (plan_only) {
    out << "\n  plan (nothing run):\n";
    for (const auto& s : strategies)
      out << "    " << s.name << ": device peak " << bytes_text(s.planned_device_bytes) << ", host "
          << bytes_text(s.planned_host_bytes)
          << (s.status == "ok" ? "" : " — would be skipped: " + s.reason) << "\n";
    return out.str();
  }
  char line[512];
  std::snprintf(line, sizeof line,
                "\n  %-13s %-28s %7s %6s %-28s %-28s %-28s %11s %11s %11s %11s %11s %9s\n",
                "strategy", "expert swap s", "GB/s", "x raw", "request s", "transfer s / request",
                "exposed s / request", "h2d/request", "d2h/request", "peak device", "pinned",
                "pageable", "cold s");
  out << line;
  auto range = [](const Stats& s, const char* f) {
    if (s.count == 0) return std::string("-");
    return fmt(f, s.median) + " [" + fmt(f, s.min) + "-" + fmt(f, s.max) + "]";
  };
  for (const auto& s : strategies) {
    if (s.status != "ok") {
      std::snprintf(line, sizeof line, "  %-13s %s: %s\n", s.name.c_str(), s.status.c_str(),
                    s.reason.c_str());
      out << line;
      continue;
    }
    std::snprintf(
        line, sizeof line,
        "  %-13s %-28s %7.2f %6s %-28s %-28s %-28s %11s %11s %11s %11s %11s %9s\n", s.name.c_str(),
        range(s.expert_swap_seconds, "%.4f").c_str(), s.expert_swap_gbps.median,
        s.ratio_to_raw_pinned ? fmt("%.2f", *s.ratio_to_raw_pinned).c_str() : "-",
        s.has_requests ? range(s.request_seconds, "%.4f").c_str() : "-",
        s.has_requests ? range(s.request_transfer_seconds, "%.4f").c_str() : "-",
        s.has_requests ? range(s.request_exposed_seconds, "%.4f").c_str() : "-",
        s.has_requests ? bytes_text(s.h2d_bytes_per_request).c_str() : "-",
        s.has_requests ? bytes_text(s.d2h_bytes_per_request).c_str() : "-",
        bytes_text(s.peak_device_bytes).c_str(), bytes_text(s.pinned_peak_bytes).c_str(),
        bytes_text(s.pageable_peak_bytes).c_str(),
        s.cold_start_seconds.count ? fmt("%.3f", s.cold_start_seconds.median).c_str() : "-");
    out << line;
  }
  if (const auto* omni = strategy("omni");
      omni && omni->status == "ok" && omni->request_device_timed_seconds)
    out << "  omni transfer time per request measured on the device (events): "
        << range(*omni->request_device_timed_seconds, "%.4f") << " s\n";
  out << "\n  targets" << (simulated ? " (simulated run: only meaningful on a GPU)" : "") << ":\n";
  for (const auto& t : targets) {
    const char* verdict = !t.pass ? "n/a " : (*t.pass ? "PASS" : "FAIL");
    out << "    " << verdict << "  " << t.name << ": " << t.measured << " (target " << t.target
        << ")\n";
  }
  if (!notes.empty()) {
    out << "\n  notes:\n";
    for (const auto& n : notes) out << "    - " << n << "\n";
  }
  return out.str();
}

void OffloadBenchResult::write_json(const std::string& path) const {
  write_json_file(path, to_json());
}

OffloadBenchResult plan_offload_bench(const OffloadBenchConfig& config) {
  auto plan = make_plan(config);
  for (auto& s : plan.result.strategies) check_fits(plan, s);
  plan.result.complete = true;
  return std::move(plan.result);
}

OffloadBenchResult run_offload_bench(const OffloadBenchConfig& config, std::ostream& progress) {
  auto plan = make_plan(config);
  auto& r = plan.result;
  if (config.plan_only) {
    for (auto& s : r.strategies) check_fits(plan, s);
    r.complete = true;
    return std::move(r);
  }
  MeteredDevice meter(*plan.device, /*cache_allocations=*/r.simulated);
  progress << "omni bench offload: " << r.profile << " at scale " << r.scale.text << " ("
           << bytes_text(r.total_bytes) << ") on " << r.device
           << (r.simulated ? " (simulated)" : "") << "\n";
  const auto image_start = Clock::now();
  CheckpointImage image(plan.profile.largest_tensor_bytes(), config.seed);
  progress << "  random weights: " << bytes_text(image.bytes()) << " image in "
           << fmt("%.2f", since(image_start)) << " s\n";
  auto publish = [&] {
    finish(r);
    if (!config.json_path.empty()) r.write_json(config.json_path);
  };
  for (auto& s : r.strategies) {
    check_fits(plan, s);
    if (s.status != "ok") {
      progress << "  " << s.name << ": skipped: " << s.reason << "\n";
      publish();
      continue;
    }
    try {
      if (s.name == "raw-pinned" || s.name == "raw-pageable")
        run_raw(plan, meter, image, s, s.name == "raw-pinned", progress);
      else
        run_repeats(plan, meter, image, s, progress);
    } catch (const std::exception& e) {
      std::string what = e.what();
      s.status = "failed";
      s.reason = what.substr(0, what.find('\n'));
      s.repeats.clear();
      progress << "  " << s.name << ": failed: " << s.reason << "\n";
      meter.release_cached_memory();
    }
    if (const auto left = meter.readings().pinned_bytes; left != 0)
      r.notes.push_back(detail::concat("after ", s.name, ", ", bytes_text(left),
                                       " were still pinned (a leak in the strategy?)"));
    publish();
  }
  r.complete = true;
  publish();
  return std::move(r);
}

}  // namespace omni::bench
