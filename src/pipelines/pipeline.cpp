// Pipeline's default batch behaviour (Note [Phase-batched runs], pipeline.h).
#include "omni/pipelines/pipeline.h"

namespace omni::pipelines {

std::vector<GenerationOutput> Pipeline::run_batch(const std::vector<GenerationRequest>& requests,
                                                  const RunContext& context) {
  std::vector<GenerationOutput> outputs;
  outputs.reserve(requests.size());
  for (const auto& request : requests) outputs.push_back(run(request, context));
  return outputs;
}

std::vector<std::string> Pipeline::batch_call_schedule(
    const std::vector<GenerationRequest>& requests) const {
  std::vector<std::string> calls;
  for (const auto& request : requests) {
    const auto one = call_schedule(request);
    calls.insert(calls.end(), one.begin(), one.end());
  }
  return calls;
}

}  // namespace omni::pipelines
