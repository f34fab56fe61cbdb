#include "bench/checkpoint/checkpoint_bench.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "bench/json_file.h"
#include "omni/device/device.h"
#include "omni/engine/inspect.h"
#include "omni/error.h"
#include "omni/io/checkpoint.h"
#include "omni/io/json_config.h"
#include "omni/io/safetensors.h"
#include "omni/models/wan/wan_transformer.h"
#include "omni/omni.h"
#include "pipelines/model_directory.h"

namespace fs = std::filesystem;

namespace omni::bench {

namespace {

using device::format_bytes;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::vector<fs::path> weight_files(const ModelPlan& plan) {
  std::vector<fs::path> files;
  for (const auto& c : plan.components)
    for (const auto& f : c.files)
      if (std::find(files.begin(), files.end(), f) == files.end()) files.push_back(f);
  return files;
}

// Drops the files' clean pages from the page cache; false when the kernel refused.
bool drop_pages(const std::vector<fs::path>& files) {
  bool ok = true;
  for (const auto& f : files) {
    const int fd = ::open(f.c_str(), O_RDONLY);
    if (fd < 0) return false;
    ::fdatasync(fd);
    ok = ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0 && ok;
    ::close(fd);
  }
  return ok;
}

// read() of every file, front to back, into one 8 MiB buffer: the disk's (or
// the page cache's) sequential speed, the floor a loader is held to.
double raw_read_seconds(const std::vector<fs::path>& files) {
  std::vector<char> buffer(8ull << 20);
  const auto start = Clock::now();
  for (const auto& f : files) {
    const int fd = ::open(f.c_str(), O_RDONLY);
    OMNI_CHECK(fd >= 0, FormatError, f.string(), ": cannot open");
    while (::read(fd, buffer.data(), buffer.size()) > 0) {
    }
    ::close(fd);
  }
  return seconds_since(start);
}

double load_seconds(const LoadBenchConfig& config) {
  EngineArgs args;
  args.model = config.model;
  args.enable_cpu_offload = true;
  args.device = "sim";
  args.dtype = config.dtype;
  args.offload.quiet = true;
  if (!config.host_memory_budget.empty())
    args.host_memory_budget_bytes = device::parse_byte_size(config.host_memory_budget);
  args.pinned_staging_bytes = device::parse_byte_size(config.pinned_staging);
  const auto start = Clock::now();
  Omni engine(args);
  return seconds_since(start);
}

std::string gbps(std::uint64_t bytes, double seconds) {
  char s[32];
  std::snprintf(s, sizeof s, "%.2f GB/s", seconds > 0 ? bytes / seconds / 1e9 : 0.0);
  return s;
}

std::uint64_t rss_anon_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("RssAnon:", 0) == 0) return std::stoull(line.substr(8)) * 1024;
  return 0;
}

struct ChildRun {
  std::uint64_t peak_rss_anon = 0;
  nlohmann::json report;
  std::string frames;  // the PNG's bytes
};

ChildRun run_generate(const std::string& omni, const fs::path& dir,
                      const std::vector<std::string>& extra, std::ostream& log) {
  const auto out = dir.parent_path() / (dir.filename().string() + "-out");
  fs::create_directories(out);
  const auto png = out / "frame.png";
  const auto report = out / "report.json";
  // 16x16, one frame: one token per forward, so the run is about memory
  // (every weight uploaded, both experts swapped), not about CPU bf16 math.
  // Two steps without CFG: one forward of each expert.
  std::vector<std::string> args = {omni,
                                   "generate",
                                   dir.string(),
                                   "--prompt",
                                   "a red circle",
                                   "--seed",
                                   "7",
                                   "--steps",
                                   "2",
                                   "--guidance-scale",
                                   "1",
                                   "--size",
                                   "16x16",
                                   "--num-frames",
                                   "1",
                                   "--enable-cpu-offload",
                                   "--device",
                                   "sim",
                                   "--output",
                                   png.string(),
                                   "--report-json",
                                   report.string(),
                                   "--quiet"};
  args.insert(args.end(), extra.begin(), extra.end());
  std::string line;
  for (const auto& a : args) line += a + " ";
  log << "running: " << line << "\n";
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  OMNI_CHECK(pid >= 0, Error, "fork failed");
  if (pid == 0) {
    ::execv(argv[0], argv.data());
    std::perror("execv");
    ::_exit(127);
  }
  ChildRun run;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    run.peak_rss_anon = std::max(run.peak_rss_anon, rss_anon_of(pid));
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  OMNI_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, Error, "omni generate failed (", line,
             ")");
  run.report = io::read_json_file(report);
  std::ifstream in(png, std::ios::binary);
  run.frames.assign(std::istreambuf_iterator<char>(in), {});
  fs::remove_all(out);
  return run;
}

}  // namespace

void LoadBenchConfig::validate() const {
  OMNI_CHECK(!model.empty(), ConfigError, "bench load: MODEL is required");
  (void)pipelines::DtypeSpec::parse(dtype);
  if (!host_memory_budget.empty()) (void)device::parse_byte_size(host_memory_budget);
  (void)device::parse_byte_size(pinned_staging);
}

LoadBenchResult run_load_bench(const LoadBenchConfig& config, std::ostream& log) {
  InspectOptions options;
  options.dtype = pipelines::DtypeSpec::parse(config.dtype);
  const auto plan = inspect_model(config.model, options);
  const auto files = weight_files(plan);
  LoadBenchResult r;
  r.weight_bytes = plan.load_bytes;
  for (const auto& f : files) r.file_bytes += fs::file_size(f);
  log << "load bench: " << files.size() << " files, " << format_bytes(r.file_bytes) << "\n";
  r.cold_measured = config.cold && drop_pages(files);
  r.raw_cold_seconds = raw_read_seconds(files);
  if (r.cold_measured) drop_pages(files);
  r.load_cold_seconds = load_seconds(config);
  r.raw_warm_seconds = raw_read_seconds(files);
  r.load_warm_seconds = load_seconds(config);
  if (!config.json_path.empty()) write_json_file(config.json_path, r.to_json());
  return r;
}

std::string LoadBenchResult::to_table() const {
  std::ostringstream out;
  char line[160];
  out << "load: " << format_bytes(weight_bytes) << " of weights from " << format_bytes(file_bytes)
      << " of files\n";
  std::snprintf(line, sizeof line, "  %-6s %14s %14s %8s\n", "cache", "raw read()", "omni load",
                "ratio");
  out << line;
  const auto row = [&](const char* cache, double raw, double load) {
    std::snprintf(line, sizeof line, "  %-6s %14s %14s %7.2fx\n", cache,
                  gbps(file_bytes, raw).c_str(), gbps(weight_bytes, load).c_str(),
                  (weight_bytes / load) / (file_bytes / raw));
    out << line;
  };
  row(cold_measured ? "cold" : "cold?", raw_cold_seconds, load_cold_seconds);
  row("warm", raw_warm_seconds, load_warm_seconds);
  if (!cold_measured) out << "  (the kernel kept the pages: the cold row may be warm)\n";
  return out.str();
}

nlohmann::json LoadBenchResult::to_json() const {
  return {{"file_bytes", file_bytes},
          {"weight_bytes", weight_bytes},
          {"cold_measured", cold_measured},
          {"raw_cold_seconds", raw_cold_seconds},
          {"raw_warm_seconds", raw_warm_seconds},
          {"load_cold_seconds", load_cold_seconds},
          {"load_warm_seconds", load_warm_seconds}};
}

std::uint64_t write_synthetic_wan(const fs::path& dir, const fs::path& tiny_shapes,
                                  int num_layers) {
  OMNI_CHECK(fs::exists(tiny_shapes / "model_index.json"), ConfigError, tiny_shapes.string(),
             ": not the tiny-shapes model (pass --tiny-shapes)");
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto* part : {"text_encoder", "tokenizer", "vae", "scheduler"})
    fs::copy(tiny_shapes / part, dir / part, fs::copy_options::recursive);
  fs::copy_file(tiny_shapes / "model_index.json", dir / "model_index.json");
  auto config = io::read_json_file(tiny_shapes / "transformer" / "config.json");
  // Wan2.1-1.3B's DiT shape; channels and text width stay tiny-shapes'.
  config["num_attention_heads"] = 12;
  config["attention_head_dim"] = 128;
  config["ffn_dim"] = 8960;
  config["num_layers"] = num_layers;
  std::uint64_t expert_bytes = 0;
  for (const auto* name : {"transformer", "transformer_2"}) {
    const auto folder = dir / name;
    fs::create_directories(folder);
    std::ofstream(folder / "config.json") << config.dump(2) << "\n";
    const auto parsed = models::wan::WanTransformer3DConfig::from_json(config, name);
    auto model = pipelines::internal::construct_in<models::wan::WanTransformer3DModel>(
        torch::kBFloat16, parsed);
    model->to_inference_dtype(torch::kBFloat16);
    const auto state =
        io::named_state(*model, models::wan::WanTransformer3DModelImpl::non_persistent_buffers());
    // Shards of about 1 GB and their index, as the real experts are stored.
    std::vector<std::vector<std::pair<std::string, torch::Tensor>>> shards(1);
    std::uint64_t in_shard = 0;
    for (const auto& [key, t] : state) {
      const auto bytes = static_cast<std::uint64_t>(t.numel() * t.element_size());
      if (in_shard > 0 && in_shard + bytes > (1ull << 30)) {
        shards.emplace_back();
        in_shard = 0;
      }
      shards.back().emplace_back(key, t);
      in_shard += bytes;
      expert_bytes += std::string(name) == "transformer" ? bytes : 0;
    }
    nlohmann::json index;
    index["metadata"] = {{"total_size", expert_bytes}};
    for (std::size_t i = 0; i < shards.size(); ++i) {
      char file[96];
      std::snprintf(file, sizeof file, "diffusion_pytorch_model-%05zu-of-%05zu.safetensors", i + 1,
                    shards.size());
      io::save_safetensors(folder / file, shards[i]);
      for (const auto& [key, t] : shards[i]) index["weight_map"][key] = file;
    }
    std::ofstream(folder / "diffusion_pytorch_model.safetensors.index.json") << index.dump(2);
  }
  return expert_bytes;
}

void CheckpointBenchConfig::validate() const {
  OMNI_CHECK(num_layers >= 1 && num_layers <= 80, ConfigError, "--layers must be in 1..80, got ",
             num_layers);
  (void)device::parse_byte_size(host_memory_budget);
  (void)device::parse_byte_size(pinned_staging);
}

CheckpointBenchResult run_checkpoint_bench(const CheckpointBenchConfig& config, std::ostream& log) {
  CheckpointBenchResult r;
  const auto omni =
      config.omni_binary.empty() ? fs::read_symlink("/proc/self/exe").string() : config.omni_binary;
  if (config.reuse && fs::exists(config.dir / "transformer_2")) {
    log << "reusing " << config.dir << "\n";
    r.expert_bytes = inspect_model(config.dir.string()).component("transformer")->bytes;
  } else {
    log << "writing " << config.dir << " (two bf16 experts of " << config.num_layers
        << " layers)...\n";
    r.expert_bytes = write_synthetic_wan(config.dir, config.tiny_shapes, config.num_layers);
  }
  log << "  expert " << format_bytes(r.expert_bytes) << " each\n";
  r.budget_bytes = device::parse_byte_size(config.host_memory_budget);
  try {
    const auto budgeted = run_generate(omni, config.dir,
                                       {"--host-memory-budget", config.host_memory_budget,
                                        "--pinned-staging", config.pinned_staging},
                                       log);
    const auto unbudgeted = run_generate(omni, config.dir, {}, log);
    r.peak_rss_anon_budget = budgeted.peak_rss_anon;
    r.peak_rss_anon_unbudgeted = unbudgeted.peak_rss_anon;
    r.device_peak_budget = budgeted.report["device_peak_allocated_bytes"].get<std::uint64_t>();
    r.device_peak_unbudgeted =
        unbudgeted.report["device_peak_allocated_bytes"].get<std::uint64_t>();
    r.pinned_budget = budgeted.report["pinned_host_bytes"].get<std::uint64_t>() +
                      budgeted.report["staging_host_bytes"].get<std::uint64_t>();
    r.pinned_unbudgeted = unbudgeted.report["pinned_host_bytes"].get<std::uint64_t>();
    r.frames_identical = !budgeted.frames.empty() && budgeted.frames == unbudgeted.frames;
    LoadBenchConfig load;
    load.model = config.dir.string();
    load.host_memory_budget = config.host_memory_budget;
    load.pinned_staging = config.pinned_staging;
    r.load = run_load_bench(load, log);
  } catch (...) {
    if (!config.keep) fs::remove_all(config.dir);
    throw;
  }
  if (!config.keep) fs::remove_all(config.dir);
  if (!config.json_path.empty()) write_json_file(config.json_path, r.to_json());
  return r;
}

std::string CheckpointBenchResult::to_table() const {
  std::ostringstream out;
  out << "synthetic Wan directory: two bf16 experts of " << format_bytes(expert_bytes) << " ("
      << format_bytes(2 * expert_bytes) << ")\n"
      << "  omni generate --enable-cpu-offload --device sim   peak RssAnon   device peak   "
         "pinned host\n";
  char line[200];
  std::snprintf(line, sizeof line, "  %-48s %13s %13s %13s\n", "without a budget",
                format_bytes(peak_rss_anon_unbudgeted).c_str(),
                format_bytes(device_peak_unbudgeted).c_str(),
                format_bytes(pinned_unbudgeted).c_str());
  out << line;
  std::snprintf(line, sizeof line, "  %-48s %13s %13s %13s\n",
                ("--host-memory-budget " + format_bytes(budget_bytes)).c_str(),
                format_bytes(peak_rss_anon_budget).c_str(),
                format_bytes(device_peak_budget).c_str(), format_bytes(pinned_budget).c_str());
  out << line;
  out << "  bound: device peak + budget + 512 MiB = " << format_bytes(bound()) << ": "
      << (peak_rss_anon_budget <= bound() ? "PASS" : "FAIL") << "\n"
      << "  frames with and without the budget: "
      << (frames_identical ? "bitwise identical (PASS)" : "DIFFERENT (FAIL)") << "\n"
      << load.to_table();
  return out.str();
}

nlohmann::json CheckpointBenchResult::to_json() const {
  return {{"expert_bytes", expert_bytes},
          {"budget_bytes", budget_bytes},
          {"peak_rss_anon_budget", peak_rss_anon_budget},
          {"peak_rss_anon_unbudgeted", peak_rss_anon_unbudgeted},
          {"device_peak_budget", device_peak_budget},
          {"device_peak_unbudgeted", device_peak_unbudgeted},
          {"pinned_budget", pinned_budget},
          {"pinned_unbudgeted", pinned_unbudgeted},
          {"bound", bound()},
          {"frames_identical", frames_identical},
          {"pass", pass()},
          {"load", load.to_json()}};
}

}  // namespace omni::bench
