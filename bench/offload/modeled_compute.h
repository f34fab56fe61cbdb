// Modeled compute for `omni bench offload` (Note [Modeled compute]): a
// request as the component calls a Wan2.2 T2V-A14B request makes, each call
// running its component's block groups in order, each group holding the
// compute thread for the time its FLOPs take at a stated rate. Movement is
// real (the strategy's own hooks and copies); compute is a wait.
//
// Note [Modeled compute]
// The rate is derived in bench/README.md from vllm-omni's 74.6 s for a
// 40-step 480p request on an H100 with no offload: a DiT block's forward is
// modeled as 2 × its parameters × 32,760 tokens (21 latent frames of 30 × 52
// patches) FLOPs, and 3,200 block forwards a request (40 steps × 2 guidance
// forwards × 40 blocks) in 74.6 s give 988 TFLOP/s. The encoder's forward
// is 2 × parameters × 512 tokens; the VAE's decode is modeled as 2 s. At 55
// GB/s (PCIe Gen5 pinned) a block's upload is then 0.55 of its forward.
// On sim, the link runs at G GB/s and every compute time is stretched by
// 55 / G, so the ratio of transfer to compute is the H100's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/offload/profile_pipeline.h"
#include "bench/offload/weight_profile.h"

namespace omni::bench {

struct ComputeModel {
  static constexpr double kRealLinkGbps = 55.0;  // PCIe Gen5 x16, pinned
  static constexpr double kRealFlops = 988e12;   // derived, Note [Modeled compute]
  static constexpr double kDitTokens = 32760;    // 480p, 81 frames
  static constexpr double kEncoderTokens = 512;  // max_sequence_length
  static constexpr double kRealVaeDecodeSeconds = 2.0;

  double slowdown = 1.0;  // 55 / G on sim; 1 on a GPU
  double scale = 1.0;     // the profile's --scale: fixed times (the VAE's) shrink with it
  int steps = 8;          // denoising steps of a bench request
  double boundary_ratio = 0.875;
  double shift = 12.0;

  // Seconds a forward of `params` parameters of a component with `role` takes.
  double forward_seconds(offload::Role role, double params) const;
  std::string describe() const;
};

// The component calls of one request, as indices into the profile: the
// encoder once per prompt (2), the expert of each step once per guidance
// forward (2 a step, high-noise expert while sigma ≥ boundary), the VAE once.
std::vector<std::size_t> request_calls(const WeightProfile& profile, const ComputeModel& model);

// One block group of a component, ready to "run": its module (whose hooks a
// forward would fire; null for the component's own tensors), one of its
// tensors to read, and its modeled compute.
struct GroupRun {
  nn::Module* module = nullptr;
  torch::Tensor probe;
  double compute_seconds = 0;
};

// Every component's groups in execution order.
std::vector<std::vector<GroupRun>> plan_group_runs(ProfilePipeline& pipeline,
                                                   const WeightProfile& profile,
                                                   const ComputeModel& model);

// Runs one call of a component: each group's forward pre-hooks, a read of
// its probe into `acc` (which waits for the compute stream), then its compute.
void run_groups(const std::vector<GroupRun>& groups, torch::Tensor& acc);

}  // namespace omni::bench
