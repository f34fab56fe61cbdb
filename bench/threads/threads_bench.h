// `omni bench threads`: generation time under each CPU threading setting of
// LibTorch's intra-op pool and OpenBLAS (Note [CPU threads and BLAS]), side by
// side in one process, against the runtime's default.
//
//   omni::bench::ThreadsBenchConfig config;   // models/tiny-shapes on cpu
//   config.validate();
//   auto result = omni::bench::run_threads_bench(config, std::cerr);
//   std::cout << result.to_table();
//
// Settings run round-robin (every setting once per round, `rounds` rounds),
// so a load that comes and goes on the machine touches each alike; figures
// are the median of the rounds. The first generation (warm-up) is not timed.
#pragma once

#include <nlohmann/json.hpp>

#include <ostream>
#include <string>
#include <vector>

#include "omni/device/cpu_threads.h"

namespace omni::bench {

struct ThreadsBenchConfig {
  std::string model = "models/tiny-shapes";
  std::string device = "cpu";  // the compute under test runs on the host: cpu | sim
  std::string prompt = "a red circle moving right on a black background";
  int steps = 10;
  int rounds = 3;
  std::string json_path;  // written at the end when set
  // ConfigError naming the option for values that cannot work.
  void validate() const;
};

struct ThreadsRow {
  device::CpuThreads threads;
  bool is_default = false;
  std::vector<double> seconds;  // one a round
  double median() const;
};

struct ThreadsBenchResult {
  std::vector<ThreadsRow> rows;
  bool openblas = false;  // whether the BLAS threads could be set at all
  std::string to_table() const;
  nlohmann::json to_json() const;
};

ThreadsBenchResult run_threads_bench(const ThreadsBenchConfig& config, std::ostream& log);

}  // namespace omni::bench
