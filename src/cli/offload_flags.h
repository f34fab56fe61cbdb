// The streaming, sim-link and host-memory flags that `omni generate` and `omni serve`
// share (Note [Streaming model-level offload], Note [The sim link]).
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "omni/error.h"
#include "omni/omni.h"

namespace omni::cli {

struct OffloadFlags {
  std::string streaming = "on";
  double sim_link_gbps = 0;
  std::string host_memory_budget;
  std::string pinned_staging = "512MiB";
  std::string vae_tiling = "on";

  void add_to(CLI::App& cmd) {
    cmd.add_option("--offload-streaming", streaming,
                   "With --enable-cpu-offload: on streams phase boundaries block by block and "
                   "hides them behind compute; off swaps whole components (the seed's strict "
                   "behaviour)")
        ->check(CLI::IsMember({"on", "off"}))
        ->capture_default_str();
    cmd.add_option("--sim-link-gbps", sim_link_gbps,
                   "Speed of the sim device's host-to-device link in GB/s (0: memcpy speed); its "
                   "timings are simulated")
        ->check(CLI::Range(0.0, 1e6))
        ->capture_default_str();
    cmd.add_option("--host-memory-budget", host_memory_budget,
                   "With --enable-cpu-offload: host memory for weights (e.g. 16GiB); components "
                   "whose pinned homes do not fit keep them in the mapped checkpoint and upload "
                   "through the pinned staging ring (omni inspect shows the plan)");
    cmd.add_option("--pinned-staging", pinned_staging,
                   "Pinned staging ring for mapped homes, part of the budget (two buffers)")
        ->capture_default_str();
    cmd.add_option("--vae-tiling", vae_tiling,
                   "on: the VAE decodes frames larger than 256x256 in overlapping, blended "
                   "tiles (bounded workspace, as diffusers' enable_tiling); off: in one piece")
        ->check(CLI::IsMember({"on", "off"}))
        ->capture_default_str();
  }
  void apply(EngineArgs& args) const {
    args.offload.streaming = streaming == "on";
    args.sim_link_gbps = sim_link_gbps;
    if (!host_memory_budget.empty())
      args.host_memory_budget_bytes = device::parse_byte_size(host_memory_budget);
    args.pinned_staging_bytes = device::parse_byte_size(pinned_staging);
    args.vae_tiling = vae_tiling == "on";
  }
};

}  // namespace omni::cli
