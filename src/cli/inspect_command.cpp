// omni inspect MODEL: prints the plan omni::inspect_model computes (the
// logic lives in engine/; this file only formats).
#include <algorithm>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/commands.h"
#include "omni/device/device.h"
#include "omni/engine/inspect.h"
#include "omni/error.h"

namespace omni::cli {

namespace {

struct InspectOptions {
  std::string model;
  std::string json;
  std::string dtype = "auto";
  std::string host_memory_budget;
  std::string pinned_staging = "512MiB";
  std::string device_memory_budget;
  std::size_t prefetch_blocks = 1;
};

// 14288491584 → "14,288,491,584".
std::string with_commas(std::uint64_t n) {
  auto digits = std::to_string(n);
  for (auto i = static_cast<std::ptrdiff_t>(digits.size()) - 3; i > 0; i -= 3)
    digits.insert(static_cast<std::size_t>(i), ",");
  return digits;
}

std::string bytes_cell(std::uint64_t bytes) {
  return with_commas(bytes) + " (" + device::format_bytes(bytes) + ")";
}

std::string dtype_cell(const std::map<io::DType, DTypeBytes>& by_dtype) {
  std::string out;
  for (const auto& [dtype, d] : by_dtype) {
    if (!out.empty()) out += ", ";
    out += std::string(io::to_string(dtype));
    if (by_dtype.size() > 1) out += " " + device::format_bytes(d.bytes);
  }
  return out;
}

// Left-aligned text columns, right-aligned number columns.
std::string format_table(const std::vector<std::vector<std::string>>& rows,
                         const std::vector<bool>& right) {
  std::vector<std::size_t> width(right.size(), 0);
  for (const auto& row : rows)
    for (std::size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  std::ostringstream out;
  for (const auto& row : rows) {
    std::string line = " ";
    for (std::size_t i = 0; i < row.size(); ++i) {
      const auto pad = std::string(width[i] - row[i].size(), ' ');
      line += " " + (right[i] ? pad + row[i] : row[i] + pad);
    }
    line.erase(line.find_last_not_of(' ') + 1);
    out << line << "\n";
  }
  return out.str();
}

// The host and device plans in one table: each component's home and where
// its weights spend a request under --offload auto's choice.
std::string homes_table(const offload::HostMemoryPlan& host, const DevicePlan& device) {
  using device::format_bytes;
  std::ostringstream out;
  out << "where the weights live: host "
      << (host.budget_bytes ? "--host-memory-budget " + format_bytes(*host.budget_bytes)
                            : std::string("without a budget"))
      << " (pinned " << format_bytes(host.pinned_bytes()) << ", mapped "
      << format_bytes(host.mapped_bytes()) << "); device --device-memory-budget "
      << format_bytes(device.budget_bytes) << " under "
      << (device.choice ? std::string(offload::to_string(device.choice->kind)) : "nothing") << "\n";
  std::vector<std::vector<std::string>> rows = {
      {"component", "host home", "bytes", "on the device"}};
  for (const auto& c : host.components) {
    const auto where = device.placement.find(c.name);
    rows.push_back({c.name, std::string(offload::to_string(c.kind)), format_bytes(c.bytes),
                    where == device.placement.end() ? "-" : where->second});
  }
  if (host.staging_bytes)
    rows.push_back({"staging ring", "pinned", format_bytes(host.staging_bytes), "-"});
  out << format_table(rows, {false, false, true, false});
  return out.str();
}

// Every mode under the budget, and --offload auto's pick.
std::string modes_table(const DevicePlan& d) {
  using device::format_bytes;
  std::ostringstream out;
  out << "offload modes under a device budget of " << format_bytes(d.budget_bytes) << " ("
      << d.prefetch_blocks << " block(s) prefetched; calls of " << d.calls_from << ": "
      << d.calls_summary() << ")\n";
  std::vector<std::vector<std::string>> rows = {
      {"mode", "runs", "planned peak", "uploaded per request"}};
  for (const auto& m : d.modes) {
    const auto mode = std::string(offload::to_string(m.kind));
    if (m.runs)
      rows.push_back(
          {mode, "yes", format_bytes(m.planned_peak_bytes), format_bytes(m.bytes_per_request)});
    else
      rows.push_back({mode, "no", "-", m.why_not});
  }
  out << format_table(rows, {false, false, true, false});
  if (d.choice)
    out << "--offload auto: " << offload::to_string(d.choice->kind) << ": " << d.choice->why
        << "\n";
  else
    out << "--offload auto: nothing runs under this budget: " << d.no_choice << "\n";
  return out.str();
}

std::string to_table(const ModelPlan& plan) {
  std::ostringstream out;
  out << "model " << plan.model;
  if (plan.pipeline_class != plan.model) out << " (" << plan.pipeline_class << ")";
  out << (plan.builtin ? ", built-in: counted from the constructed modules"
                       : ", from model_index.json, config.json and safetensors headers only")
      << "\n";
  std::vector<std::vector<std::string>> rows = {
      {"component", "class", "role", "tensors", "parameters", "bytes", "dtypes", "loads as"}};
  std::uint64_t tensors = 0;
  for (const auto& c : plan.components) {
    if (!c.role) {
      rows.push_back({c.name, c.class_name, "-", "-", "-", "-", "no weights", "-"});
      continue;
    }
    tensors += c.tensors;
    rows.push_back(
        {c.name, c.class_name, std::string(offload::to_string(*c.role)), with_commas(c.tensors),
         with_commas(c.parameters), bytes_cell(c.bytes), dtype_cell(c.by_dtype),
         std::string(io::to_string(*c.load_dtype)) + " " + device::format_bytes(c.load_bytes)});
  }
  rows.push_back({"total", "", "", with_commas(tensors), with_commas(plan.parameters),
                  bytes_cell(plan.bytes), dtype_cell(plan.by_dtype),
                  device::format_bytes(plan.load_bytes)});
  out << format_table(rows, {false, false, false, true, true, true, false, false});

  std::uint64_t encoders = 0, largest_dit = 0, largest_split = 0, statics = 0;
  for (const auto& c : plan.components) {
    if (!c.role) continue;
    switch (*c.role) {
      case offload::Role::encoder:
        encoders += c.load_bytes;
        break;
      case offload::Role::dit:
        largest_dit = std::max(largest_dit, c.load_bytes);
        break;
      case offload::Role::split:
        largest_split = std::max(largest_split, c.load_bytes);
        break;
      case offload::Role::vae:
      case offload::Role::resident:
        statics += c.load_bytes;
        break;
    }
  }
  out << "planned peak resident weights (loaded with --dtype " << plan.dtype << ")\n"
      << "  with model-level offload  " << bytes_cell(plan.planned_peak_with_offload_bytes)
      << "  = max(encoders " << device::format_bytes(encoders) << ", largest DiT "
      << device::format_bytes(largest_dit);
  if (largest_split > 0) out << ", largest split component " << device::format_bytes(largest_split);
  out << ") + VAE and resident " << device::format_bytes(statics) << "\n"
      << "  without offload           " << bytes_cell(plan.planned_peak_without_offload_bytes)
      << "\n";
  out << (plan.device_plan ? homes_table(plan.host_plan, *plan.device_plan)
                           : plan.host_plan.to_table());
  if (plan.device_plan) out << modes_table(*plan.device_plan);
  for (const auto& c : plan.components)
    if (!c.note.empty()) out << "note: " << c.name << ": " << c.note << "\n";
  return out.str();
}

int inspect(const InspectOptions& o) {
  omni::InspectOptions options;
  options.dtype = pipelines::DtypeSpec::parse(o.dtype);
  if (!o.host_memory_budget.empty())
    options.host_memory_budget_bytes = device::parse_byte_size(o.host_memory_budget);
  options.pinned_staging_bytes = device::parse_byte_size(o.pinned_staging);
  if (!o.device_memory_budget.empty())
    options.device_memory_budget_bytes = device::parse_byte_size(o.device_memory_budget);
  options.prefetch_blocks = o.prefetch_blocks;
  const auto plan = inspect_model(o.model, options);
  if (o.json == "-") {
    std::cout << plan.to_json().dump(2) << "\n";
    return 0;
  }
  std::cout << to_table(plan);
  if (!o.json.empty()) {
    std::ofstream out(o.json);
    OMNI_CHECK(out.good(), FormatError, o.json, ": cannot create JSON file");
    out << plan.to_json().dump(2) << "\n";
    OMNI_CHECK(out.good(), FormatError, o.json, ": write failed");
  }
  return 0;
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto options = std::make_shared<InspectOptions>();
  auto* cmd = app.add_subcommand(
      "inspect",
      "Show a model's components, roles, parameters, bytes by dtype and the planned peak "
      "resident weights with and without offload, the host plan and, with a device budget, the "
      "device plan of each offload mode (reads headers only, never the weights)");
  cmd->add_option("model", options->model,
                  "Model: a diffusers directory (model_index.json) or example:wan-shaped")
      ->required();
  cmd->add_option("--dtype", options->dtype,
                  "Plan loading in: auto (each component's stored dtype), float32, bfloat16, "
                  "float16, or per component (transformer=bfloat16,vae=float32)")
      ->capture_default_str();
  cmd->add_option("--host-memory-budget", options->host_memory_budget,
                  "Plan host memory for weights under BYTES (e.g. 16GiB): components that do "
                  "not fit keep their home in the mapped checkpoint");
  cmd->add_option("--pinned-staging", options->pinned_staging,
                  "Pinned staging ring for mapped homes (taken from the budget)")
      ->capture_default_str();
  cmd->add_option("--device-memory-budget", options->device_memory_budget,
                  "Plan the device under BYTES of weights (e.g. 20GiB): what each offload mode "
                  "would hold and upload per request, and what --offload auto would pick");
  cmd->add_option("--prefetch-blocks", options->prefetch_blocks,
                  "For the layerwise plan: blocks uploaded ahead of the one computing")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--json", options->json,
                  "Also write the plan as JSON to PATH ('-': stdout only)");
  cmd->callback([options] { std::exit(run_guarded([&] { return inspect(*options); })); });
}

}  // namespace omni::cli
