// The example:wan-shaped pipeline as the offload mode tests use it: a small
// request, the engine arguments for a mode, the frames without offload to
// compare with, and the sizes a test derives its budgets from.
#pragma once

#include <torch/torch.h>

#include <algorithm>

#include "omni/omni.h"

namespace wan_shaped {

inline omni::GenerationRequest request(std::uint64_t seed = 9) {
  omni::GenerationRequest r;
  r.prompt = "a green triangle";
  r.negative_prompt = "blurry";
  r.seed = seed;
  r.steps = 4;
  r.width = 32;
  r.height = 32;
  r.num_frames = 5;
  return r;
}

// On sim, quiet, without the prompt cache (every request runs its encoder,
// so a request's calls are exactly its schedule).
inline omni::EngineArgs args() {
  omni::EngineArgs args;
  args.model = "example:wan-shaped";
  args.device = "sim";
  args.offload.quiet = true;
  args.prompt_cache_bytes = 0;
  return args;
}

inline torch::Tensor frames_without_offload(const omni::GenerationRequest& r) {
  omni::EngineArgs cpu;
  cpu.model = "example:wan-shaped";
  cpu.device = "cpu";
  omni::Omni omni(cpu);
  return omni.generate(r).frames;
}

// Bytes of every component as the ledger counts them, by role.
struct Sizes {
  std::uint64_t total = 0, largest = 0, largest_dit = 0, vae = 0;
};
inline Sizes sizes() {
  auto a = args();
  a.enable_cpu_offload = true;
  omni::Omni probe(a);
  Sizes s;
  for (const auto& e : probe.backend()->ledger().entries()) {
    s.total += e.bytes;
    s.largest = std::max(s.largest, e.bytes);
    if (e.role == omni::offload::Role::dit) s.largest_dit = std::max(s.largest_dit, e.bytes);
    if (e.role == omni::offload::Role::vae) s.vae += e.bytes;
  }
  return s;
}

}  // namespace wan_shaped
