// A check the unified-model tests share: a model generates the same frames
// through Omni with --enable-cpu-offload on the sim device as without it,
// uploading the reasoner once and the generator once per request.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>

#include "omni/omni.h"
#include "omni/pipelines/pipeline.h"

namespace omni::train {

// `frames`: what the pipeline made of `request` without offload.
inline void expect_split_offload_matches(const std::filesystem::path& model,
                                         const pipelines::GenerationRequest& request,
                                         const torch::Tensor& frames, int requests) {
  EngineArgs args;
  args.model = model.string();
  args.enable_cpu_offload = true;
  args.device = "sim";
  args.offload.quiet = true;
  Omni engine(args);
  for (int i = 0; i < requests; ++i) {
    const auto result = engine.generate(request);
    EXPECT_TRUE(torch::equal(result.frames, frames)) << "request " << i;
    const auto* reasoner = result.report.component("reasoner");
    const auto* generator = result.report.component("generator");
    ASSERT_NE(reasoner, nullptr) << "request " << i;
    ASSERT_NE(generator, nullptr) << "request " << i;
    EXPECT_EQ(reasoner->uploads, 1u) << "request " << i;
    EXPECT_EQ(generator->uploads, 1u) << "request " << i;
  }
}

}  // namespace omni::train
