#include "bench/offload/modeled_compute.h"

#include <chrono>
#include <cstdio>
#include <map>
#include <thread>

#include "omni/error.h"
#include "omni/offload/components.h"
#include "omni/offload/host_home.h"

namespace omni::bench {

double ComputeModel::forward_seconds(offload::Role role, double params) const {
  switch (role) {
    case offload::Role::dit:
    case offload::Role::split:
      return 2 * params * kDitTokens / kRealFlops * slowdown;
    case offload::Role::encoder:
      return 2 * params * kEncoderTokens / kRealFlops * slowdown;
    case offload::Role::vae:
    case offload::Role::resident:
      return 0;  // the VAE's decode is spread over its groups by plan_group_runs
  }
  return 0;
}

std::string ComputeModel::describe() const {
  char line[256];
  std::snprintf(line, sizeof line,
                "modeled compute: %d steps x 2 guidance forwards, %.0f TFLOP/s (an H100 running "
                "A14B, bench/README.md) slowed %.2fx with the link",
                steps, kRealFlops / 1e12, slowdown);
  return line;
}

std::vector<std::size_t> request_calls(const WeightProfile& profile, const ComputeModel& model) {
  std::vector<std::size_t> encoders, dits, vaes;
  for (std::size_t i = 0; i < profile.components.size(); ++i) {
    const auto role = profile.components[i].role;
    (role == offload::Role::encoder ? encoders
     : role == offload::Role::dit   ? dits
                                    : vaes)
        .push_back(i);
  }
  OMNI_INTERNAL_ASSERT(!dits.empty(), "profile without a DiT");
  std::vector<std::size_t> calls;
  for (int prompt = 0; prompt < 2; ++prompt)
    calls.insert(calls.end(), encoders.begin(), encoders.end());
  for (int i = 0; i < model.steps; ++i) {
    const double s = 1.0 - static_cast<double>(i) / model.steps;
    const double sigma = model.shift * s / (1 + (model.shift - 1) * s);
    const auto expert = sigma >= model.boundary_ratio || dits.size() == 1 ? dits.front() : dits[1];
    calls.insert(calls.end(), 2, expert);
  }
  calls.insert(calls.end(), vaes.begin(), vaes.end());
  return calls;
}

std::vector<std::vector<GroupRun>> plan_group_runs(ProfilePipeline& pipeline,
                                                   const WeightProfile& profile,
                                                   const ComputeModel& model) {
  std::vector<std::vector<GroupRun>> out(pipeline.size());
  const auto element = static_cast<double>(c10::elementSize(profile.dtype));
  for (std::size_t i = 0; i < pipeline.size(); ++i) {
    auto& component = pipeline.component(i);
    const auto role = profile.components[i].role;
    const double component_bytes = static_cast<double>(profile.components[i].bytes(profile.dtype));
    // The groups offload moves (Note [Block groups] in host_home.cpp), in order.
    std::map<std::string, std::size_t> index;
    std::vector<double> bytes;
    for (const auto& e : offload::unique_tensors(component)) {
      auto [it, fresh] = index.emplace(e.group, out[i].size());
      if (fresh) {
        GroupRun run;
        run.probe = e.tensor;
        if (!e.group.empty())
          run.module = dynamic_cast<nn::Module*>(offload::find_module(component, e.group).get());
        out[i].push_back(run);
        bytes.push_back(0);
      }
      bytes[it->second] += static_cast<double>(e.tensor.numel()) * element;
    }
    for (std::size_t g = 0; g < out[i].size(); ++g)
      out[i][g].compute_seconds = role == offload::Role::vae
                                      ? ComputeModel::kRealVaeDecodeSeconds * model.scale *
                                            model.slowdown * bytes[g] / component_bytes
                                      : model.forward_seconds(role, bytes[g] / element);
  }
  return out;
}

void run_groups(const std::vector<GroupRun>& groups, torch::Tensor& acc) {
  for (const auto& g : groups) {
    if (g.module) {
      nn::ForwardScope scope(*g.module);  // the group's hooks: streaming waits here
    }
    // Reading the group's weights needs its copy; item() waits for compute.
    acc = acc + g.probe.reshape({-1}).narrow(0, 0, 1).to(torch::kFloat).sum();
    (void)acc.item<float>();
    if (g.compute_seconds > 0)
      std::this_thread::sleep_for(std::chrono::duration<double>(g.compute_seconds));
  }
}

}  // namespace omni::bench
