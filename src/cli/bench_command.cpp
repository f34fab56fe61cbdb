// `omni bench …`: the benchmark programs of bench/. Thin: options into the
// benchmark's typed config, run, print its table, write its JSON.
#include <iostream>
#include <memory>
#include <sstream>

#include "cli/commands.h"
#include "omni/error.h"
#if OMNI_WITH_BENCH
#include "bench/checkpoint/checkpoint_bench.h"
#include "bench/offload/offload_bench.h"
#include "bench/soak/soak_bench.h"
#include "bench/threads/threads_bench.h"
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

// Exit status 1 when the verdict is FAIL, so scripts can gate on it.
int bench_soak(const bench::SoakBenchConfig& config) {
  const auto result = bench::run_soak_bench(config, std::cout);
  std::cout << result.verdict_line() << "\n";
  if (!config.json_path.empty()) std::cout << "wrote " << config.json_path << "\n";
  return result.pass ? 0 : 1;
}

void add_checkpoint_commands(CLI::App& bench_cmd) {
  auto load = std::make_shared<bench::LoadBenchConfig>();
  auto* load_cmd = bench_cmd.add_subcommand(
      "load",
      "Load GB/s (engine start with offload on sim: weights into homes) against a raw "
      "sequential read of the same files, cold and warm page cache");
  load_cmd->add_option("model", load->model, "Model: a diffusers directory or a hub id")
      ->required();
  load_cmd->add_option("--dtype", load->dtype, "As omni generate --dtype")->capture_default_str();
  load_cmd->add_option("--host-memory-budget", load->host_memory_budget,
                       "As omni generate --host-memory-budget");
  load_cmd->add_option("--pinned-staging", load->pinned_staging, "As omni generate")
      ->capture_default_str();
  load_cmd->add_option("--json", load->json_path, "Write the figures as JSON");
  load_cmd->callback([load] {
    std::exit(run_guarded([&] {
      load->validate();
      std::cout << bench::run_load_bench(*load, std::cerr).to_table();
      return 0;
    }));
  });

  auto ckpt = std::make_shared<bench::CheckpointBenchConfig>();
  auto* ckpt_cmd = bench_cmd.add_subcommand(
      "checkpoint",
      "Write a synthetic bf16 Wan directory (two 2.8 GB experts), run omni generate on it with "
      "and without --host-memory-budget, print peak RssAnon against device peak + budget + "
      "512 MiB, and load GB/s against a raw read; deletes the directory afterwards");
  ckpt_cmd->add_option("--dir", ckpt->dir, "Where to write the directory")->capture_default_str();
  ckpt_cmd
      ->add_option("--tiny-shapes", ckpt->tiny_shapes,
                   "models/tiny-shapes (its encoder, tokenizer, VAE, scheduler are reused)")
      ->capture_default_str();
  ckpt_cmd->add_option("--layers", ckpt->num_layers, "Layers per expert (30: 2.8 GB in bf16)")
      ->capture_default_str();
  ckpt_cmd->add_option("--host-memory-budget", ckpt->host_memory_budget, "The budget measured")
      ->capture_default_str();
  ckpt_cmd->add_option("--pinned-staging", ckpt->pinned_staging, "Its staging ring")
      ->capture_default_str();
  ckpt_cmd->add_flag("--keep", ckpt->keep, "Keep the directory");
  ckpt_cmd->add_flag("--reuse", ckpt->reuse, "Use the directory a --keep run left");
  ckpt_cmd->add_option("--json", ckpt->json_path, "Write the figures as JSON");
  ckpt_cmd->callback([ckpt] {
    std::exit(run_guarded([&] {
      ckpt->validate();
      const auto result = bench::run_checkpoint_bench(*ckpt, std::cerr);
      std::cout << result.to_table();
      return result.pass() ? 0 : 1;
    }));
  });
}

void add_soak_command(CLI::App& bench_cmd) {
  auto config = std::make_shared<bench::SoakBenchConfig>();
  config->json_path = "bench-soak.json";
  auto* cmd = bench_cmd.add_subcommand(
      "soak",
      "Many generations in one process with offload on: RSS, pinned host and device memory "
      "after warm-up and at intervals, and whether they stayed flat");
  cmd->add_option("--model", config->model, "Model (example:wan-shaped or a diffusers directory)")
      ->capture_default_str();
  cmd->add_option("--device", config->device, "sim | cuda[:N] | cpu")->capture_default_str();
  cmd->add_option("--generations", config->generations, "Generations in the run")
      ->capture_default_str();
  cmd->add_option("--warmup", config->warmup, "Generations before the baseline sample")
      ->capture_default_str();
  cmd->add_option("--interval", config->interval, "Generations between samples")
      ->capture_default_str();
  cmd->add_option("--prompt", config->prompt, "Prompt of every generation")->capture_default_str();
  cmd->add_option("--seed", config->base_seed, "First seed (generations cycle through 4 seeds)")
      ->capture_default_str();
  cmd->add_flag("!--no-offload", config->offload, "Run without model-level offload");
  cmd->add_option("--sim-memory", config->sim_memory, "Capacity of the sim device")
      ->capture_default_str();
  cmd->add_option("--rss-slack", config->rss_slack, "RSS growth always tolerated")
      ->capture_default_str();
  cmd->add_option("--rss-fraction", config->rss_fraction,
                  "RSS growth tolerated as a fraction of the baseline, if larger than the slack")
      ->capture_default_str();
  cmd->add_option("--json", config->json_path, "Where to write the JSON (\"\" for none)")
      ->capture_default_str();
  cmd->callback([config] { std::exit(run_guarded([&] { return bench_soak(*config); })); });
}

void add_threads_command(CLI::App& bench_cmd) {
  auto config = std::make_shared<bench::ThreadsBenchConfig>();
  auto* cmd = bench_cmd.add_subcommand(
      "threads",
      "Generation time for each setting of LibTorch's intra-op threads and OpenBLAS' threads, "
      "against the runtime's default (Note [CPU threads and BLAS])");
  cmd->add_option("--model", config->model, "Model (a diffusers directory or example:wan-shaped)")
      ->capture_default_str();
  cmd->add_option("--device", config->device, "cpu | sim")->capture_default_str();
  cmd->add_option("--steps", config->steps, "Denoising steps a generation")->capture_default_str();
  cmd->add_option("--rounds", config->rounds, "Generations per setting (medians are printed)")
      ->capture_default_str();
  cmd->add_option("--json", config->json_path, "Write the figures as JSON");
  cmd->callback([config] {
    std::exit(run_guarded([&] {
      config->validate();
      std::cout << bench::run_threads_bench(*config, std::cerr).to_table();
      return 0;
    }));
  });
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
  cmd->add_option("--strategies", *strategies,
                  "Comma-separated: all-resident,omni,omni-streamed,omni-budget,omni-layerwise,"
                  "copy-back,accelerate,raw")
      ->capture_default_str();
  cmd->add_option("--sim-memory", config->sim_memory, "Capacity of the sim device")
      ->capture_default_str();
  cmd->add_option("--sim-link-gbps", config->sim_link_gbps,
                  "Sim link speed in GB/s; above 0, requests run with modeled compute slowed by "
                  "the same factor from an H100 over PCIe Gen5 (bench/README.md)")
      ->capture_default_str();
  cmd->add_option("--steps", config->steps, "Denoising steps of a modeled request")
      ->capture_default_str();
  cmd->add_option("--device-memory-budget", config->device_memory_budget,
                  "omni-budget's and omni-layerwise's device memory budget: a size (300MiB) or a "
                  "share of the scaled weights (60%)")
      ->capture_default_str();
  cmd->add_option("--json", config->json_path, "Where to write the JSON (\"\" for none)")
      ->capture_default_str();
  cmd->add_flag("--plan", config->plan_only,
                "Print the plan (components, sizes, planned peaks) and run nothing");
  cmd->callback([config, strategies] {
    std::exit(run_guarded([&] { return bench_offload(*config, *strategies); }));
  });
  add_soak_command(*bench_cmd);
  add_checkpoint_commands(*bench_cmd);
  add_threads_command(*bench_cmd);
#else
  for (const char* name : {"offload", "soak", "load", "checkpoint", "threads"}) {
    auto* cmd = bench_cmd->add_subcommand(name, std::string("The ") + name + " benchmark");
    cmd->allow_extras();
    cmd->callback([] {
      std::cerr << "omni: this build has no benchmarks (configure with -DOMNI_BUILD_BENCH=ON)\n";
      std::exit(2);
    });
  }
#endif
}

}  // namespace omni::cli
