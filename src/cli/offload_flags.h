// The streaming and sim-link flags that `omni generate` and `omni serve`
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
  }
  void apply(EngineArgs& args) const {
    args.offload.streaming = streaming == "on";
    args.sim_link_gbps = sim_link_gbps;
  }
};

}  // namespace omni::cli
