// `omni bench …`: the benchmark programs of bench/. Thin: options into the
// benchmark's typed config, run, print its table, write its JSON.
#include <iostream>
#include <memory>
#include <sstream>

#include "cli/commands.h"
#include "omni/error.h"
#if OMNI_WITH_BENCH
#include "bench/offload/offload_bench.h"
#endif

namespace omni::cli {

namespace {

#if OMNI_WITH_BENCH
std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

int bench_offload(bench::OffloadBenchConfig config, const std::string& strategies) {
  config.strategies = split_list(strategies);
  config.validate();
  const auto result = bench::run_offload_bench(config, std::cerr);
  std::cout << result.to_table();
  if (!config.json_path.empty()) {
    result.write_json(config.json_path);
    std::cout << "\nwrote " << config.json_path << "\n";
  }
  return 0;
}
#endif

}  // namespace

void add_bench_command(CLI::App& app) {
  auto* bench_cmd =
      app.add_subcommand("bench", "Benchmarks: our runtime side by side with baselines");
  bench_cmd->require_subcommand(1);
#if OMNI_WITH_BENCH
  auto config = std::make_shared<bench::OffloadBenchConfig>();
  config->json_path = "bench-offload.json";
  auto strategies = std::make_shared<std::string>("omni,copy-back,accelerate,raw");
  auto* cmd = bench_cmd->add_subcommand(
      "offload",
      "Swap cost of model-level offload: omni vs vllm-omni's copy-back mover vs diffusers' "
      "enable_model_cpu_offload vs the raw link, in one process");
  cmd->add_option("--profile", config->profile, "Weight profile (real tensor shapes)")
      ->capture_default_str();
  cmd->add_option("--scale", config->scale,
                  "Fraction of the real bytes, e.g. 1, 0.01 or 1/64 (default: 1 on cuda; "
                  "at most 1 GB of weights on sim)");
  cmd->add_option("--requests", config->requests,
                  "Requests per repeat (encoder -> experts -> VAE each); the first is the cold one")
      ->capture_default_str();
  cmd->add_option("--repeats", config->repeats, "Fresh builds, each with its own cold start")
      ->capture_default_str();
  cmd->add_option("--device", config->device, "auto | sim | cuda[:N]")->capture_default_str();
  cmd->add_option("--strategies", *strategies, "Comma-separated: omni,copy-back,accelerate,raw")
      ->capture_default_str();
  cmd->add_option("--sim-memory", config->sim_memory, "Capacity of the sim device")
      ->capture_default_str();
  cmd->add_option("--json", config->json_path, "Where to write the JSON (\"\" for none)")
      ->capture_default_str();
  cmd->add_flag("--plan", config->plan_only,
                "Print the plan (components, sizes, planned peaks) and run nothing");
  cmd->callback([config, strategies] {
    std::exit(run_guarded([&] { return bench_offload(*config, *strategies); }));
  });
#else
  auto* cmd = bench_cmd->add_subcommand("offload", "Swap cost of model-level offload");
  cmd->allow_extras();
  cmd->callback([] {
    std::cerr << "omni: this build has no benchmarks (configure with -DOMNI_BUILD_BENCH=ON)\n";
    std::exit(2);
  });
#endif
}

}  // namespace omni::cli
