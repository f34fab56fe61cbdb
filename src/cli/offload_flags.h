// The offload flags that `omni generate` and `omni serve` share: streaming,
// the device memory budget and reserve, host memory, the sim link (Note
// [Streaming model-level offload], Note [Residency policies], Note [The sim link]).
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "omni/error.h"
#include "omni/omni.h"

namespace omni::cli {

struct OffloadFlags {
  std::string streaming = "on";
  std::string device_memory_budget;  // empty: none (strict model-level)
  std::string reserve_memory;        // empty: the device's default
  bool layerwise = false;
  std::string mode;  // --offload: "" or "auto"
  std::size_t prefetch_blocks = 1;
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
    cmd.add_option("--device-memory-budget", device_memory_budget,
                   "Device bytes the weights may hold (e.g. 20GiB). Implies offload: components "
                   "stay on the device while they fit and leave only when the budget forces it, "
                   "chosen to upload the fewest bytes over the known schedule");
    cmd.add_option("--offload", mode,
                   "auto: choose all-resident, streamed model-level, budgeted or layerwise offload "
                   "from the component sizes and the budget, and say which and why")
        ->check(CLI::IsMember({"auto"}));
    cmd.add_flag("--enable-layerwise-offload", layerwise,
                 "DiT blocks stream through every call, the rest as under the budget: runs where "
                 "one DiT does not fit the device (the budget defaults to the device's memory "
                 "minus --reserve-memory)");
    cmd.add_option("--prefetch-blocks", prefetch_blocks,
                   "With --enable-layerwise-offload: blocks uploaded ahead of the one computing")
        ->check(CLI::Range(1, 64))
        ->capture_default_str();
    cmd.add_option("--reserve-memory", reserve_memory,
                   "Device bytes kept free of weights for activations and other programs (default: "
                   "0 on sim, a fifth of the card and at least 4GiB on cuda); the default budget "
                   "is the device's memory minus this");
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
  // ConfigError for a malformed size.
  void apply(EngineArgs& args) const {
    args.offload.streaming = streaming == "on";
    args.enable_layerwise_offload = layerwise;
    args.offload_auto = mode == "auto";
    args.offload.prefetch_blocks = prefetch_blocks;
    if (!device_memory_budget.empty())
      args.offload.device_memory_budget = device::parse_byte_size(device_memory_budget);
    if (!reserve_memory.empty())
      args.offload.reserve_bytes = device::parse_byte_size(reserve_memory);
    args.sim_link_gbps = sim_link_gbps;
    if (!host_memory_budget.empty())
      args.host_memory_budget_bytes = device::parse_byte_size(host_memory_budget);
    args.pinned_staging_bytes = device::parse_byte_size(pinned_staging);
    args.vae_tiling = vae_tiling == "on";
  }
};

}  // namespace omni::cli
