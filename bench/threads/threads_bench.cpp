#include "bench/threads/threads_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <thread>

#include "bench/json_file.h"
#include "omni/error.h"
#include "omni/omni.h"

namespace omni::bench {

void ThreadsBenchConfig::validate() const {
  if (device != "cpu" && device != "sim")
    throw ConfigError("--device must be cpu or sim (the threads measured are the host's), not " +
                      device);
  if (steps < 1) throw ConfigError("--steps must be at least 1");
  if (rounds < 1) throw ConfigError("--rounds must be at least 1");
}

double ThreadsRow::median() const {
  auto sorted = seconds;
  std::sort(sorted.begin(), sorted.end());
  return sorted.empty() ? 0 : sorted[sorted.size() / 2];
}

namespace {

// The runtime's default first, then each pairing of one thread and every
// core for intra-op and BLAS threads.
std::vector<ThreadsRow> settings() {
  const auto chosen = device::default_cpu_threads();
  std::vector<ThreadsRow> rows{{chosen, true, {}}};
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  std::vector<int> counts{cores};
  if (cores > 1) counts.push_back(1);
  const std::vector<int> blas_counts = chosen.blas > 0 ? counts : std::vector<int>{0};
  for (int intra : counts)
    for (int blas : blas_counts)
      if (intra != chosen.intra_op || blas != chosen.blas)
        rows.push_back({{intra, blas}, false, {}});
  return rows;
}

std::string describe(const device::CpuThreads& t) {
  std::ostringstream out;
  out << "intra-op " << t.intra_op << ", BLAS ";
  if (t.blas > 0)
    out << t.blas;
  else
    out << "n/a";
  return out.str();
}

}  // namespace

ThreadsBenchResult run_threads_bench(const ThreadsBenchConfig& config, std::ostream& log) {
  const auto before = device::cpu_threads();
  EngineArgs args;
  args.model = config.model;
  args.device = config.device;
  args.enable_cpu_offload = config.device == "sim";
  Omni engine(args);  // applies the default (Note [CPU threads and BLAS])
  GenerationRequest request;
  request.prompt = config.prompt;
  request.seed = 7;
  request.steps = config.steps;
  engine.generate(request);  // warm-up: first-touch allocations, prompt cache

  ThreadsBenchResult result;
  result.openblas = before.blas > 0;
  result.rows = settings();
  for (int round = 1; round <= config.rounds; ++round)
    for (auto& row : result.rows) {
      device::set_cpu_threads(row.threads);
      const auto start = std::chrono::steady_clock::now();
      engine.generate(request);
      row.seconds.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      log << "round " << round << ": " << describe(row.threads) << ": " << row.seconds.back()
          << " s\n";
    }
  device::set_cpu_threads(device::default_cpu_threads());
  if (!config.json_path.empty()) write_json_file(config.json_path, result.to_json());
  return result;
}

std::string ThreadsBenchResult::to_table() const {
  std::ostringstream out;
  const double base = rows.empty() ? 0 : rows.front().median();
  out << "generation time by CPU threading (median of rounds; CPU timings)\n";
  if (!openblas) out << "BLAS threads cannot be set here (no OpenBLAS in this process)\n";
  out << "setting                  seconds   x default\n";
  for (const auto& row : rows) {
    char line[128];
    std::snprintf(line, sizeof line, "%-24s %7.3f   %9.2f%s\n", describe(row.threads).c_str(),
                  row.median(), base > 0 ? row.median() / base : 0.0,
                  row.is_default ? "  (the runtime's default)" : "");
    out << line;
  }
  return out.str();
}

nlohmann::json ThreadsBenchResult::to_json() const {
  nlohmann::json out = {{"openblas", openblas}, {"rows", nlohmann::json::array()}};
  for (const auto& row : rows)
    out["rows"].push_back({{"intra_op_threads", row.threads.intra_op},
                           {"blas_threads", row.threads.blas},
                           {"default", row.is_default},
                           {"seconds", row.seconds},
                           {"median_seconds", row.median()}});
  return out;
}

}  // namespace omni::bench
