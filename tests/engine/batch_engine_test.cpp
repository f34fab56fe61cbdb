// Phase-batched generation through the engine (Note [Batched generation],
// omni.h; Note [Phase-batched runs], pipeline.h): each request of a batch gets
// the frames it gets alone, each expert is uploaded once per batch, and one
// request's cancellation or failure stays its own. On the built-in example
// and on a real WanPipeline directory (models/tiny-shapes).
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <filesystem>
#include <iostream>
#include <stdexcept>

#include "omni/error.h"
#include "omni/io/tokenizer.h"
#include "omni/omni.h"
#include "omni/pipelines/wan_pipeline.h"

namespace omni {
namespace {

EngineArgs batch_engine_args(const std::string& model, double link_gbps = 0) {
  EngineArgs args;
  args.model = model;
  args.enable_cpu_offload = true;
  args.device = "sim";
  args.sim_link_gbps = link_gbps;
  args.prompt_cache_bytes = 0;  // every request encodes: the upload counts are the batch's own
  return args;
}

std::string tiny_shapes_dir() {
  return (std::filesystem::path(OMNI_SOURCE_DIR) / "models" / "tiny-shapes").string();
}

// Three requests of one shape with their own prompts and seeds.
std::vector<GenerationRequest> batch_requests(int steps = 3) {
  const char* prompts[] = {"a red circle moving right on a black background",
                           "a blue square moving left on a white background",
                           "a green triangle moving up on a black background"};
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 3; ++i) {
    GenerationRequest r;
    r.prompt = prompts[i];
    r.negative_prompt = "blurry";
    r.steps = steps;
    r.width = 32;
    r.height = 32;
    r.num_frames = 5;
    r.guidance_scale = 4.0;
    r.seed = 11 + 7 * static_cast<std::uint64_t>(i);
    requests.push_back(r);
  }
  return requests;
}

std::uint64_t uploads_of(const offload::OffloadReport& report, const std::string& component) {
  const auto* c = report.component(component);
  return c == nullptr ? 0 : c->uploads;
}

void expect_batch_matches_alone(const std::string& model) {
  SCOPED_TRACE(model);
  Omni omni(batch_engine_args(model));
  const auto requests = batch_requests();
  std::vector<GenerateResult> alone;
  std::uint64_t alone_expert_uploads = 0;
  for (const auto& r : requests) {
    alone.push_back(omni.generate(r));
    alone_expert_uploads += uploads_of(alone.back().report, "transformer") +
                            uploads_of(alone.back().report, "transformer_2");
  }
  const auto outcomes = omni.generate_batch(requests);
  ASSERT_EQ(outcomes.size(), requests.size());
  for (std::size_t i = 0; i < outcomes.size(); ++i) {
    ASSERT_FALSE(outcomes[i].error) << "request " << i;
    const auto& batched = outcomes[i].result;
    EXPECT_EQ(batched.batch_size, 3u);
    EXPECT_EQ(batched.request.seed, requests[i].seed);
    ASSERT_EQ(batched.frames.sizes(), alone[i].frames.sizes());
    // The DiT at batch 3 differs from batch 1 in the last bits of a float
    // (BatchedLatentsStayWithinTheMeasuredTolerance); after rounding to uint8
    // a few values land one level apart, never more.
    const auto diff = (batched.frames.to(torch::kInt32) - alone[i].frames.to(torch::kInt32)).abs();
    EXPECT_LE(diff.max().item<int>(), 1) << "request " << i << ": frames differ from alone";
    const double differing = diff.gt(0).sum().item<double>() / static_cast<double>(diff.numel());
    EXPECT_LT(differing, 0.01) << "request " << i;
    std::cout << "[ measured ] " << model << " request " << i << ": max |frames diff| "
              << diff.max().item<int>() << ", values differing " << 100 * differing << " %\n";
  }
  // Each expert became resident once for the whole batch (alone: once per request).
  const auto& report = outcomes[0].result.report;
  EXPECT_EQ(uploads_of(report, "transformer"), 1u);
  EXPECT_EQ(uploads_of(report, "transformer_2"), 1u);
  EXPECT_EQ(uploads_of(report, "text_encoder"), 1u);
  EXPECT_EQ(alone_expert_uploads, 6u);
}

TEST(BatchEngine, TheBuiltInExampleMatchesAloneWithOneUploadPerExpert) {
  expect_batch_matches_alone("example:wan-shaped");
}

TEST(BatchEngine, AWanPipelineDirectoryMatchesAloneWithOneUploadPerExpert) {
  if (!io::Tokenizer::available()) GTEST_SKIP() << "built without OMNI_WITH_TOKENIZER";
  expect_batch_matches_alone(tiny_shapes_dir());
}

// The denoised latents themselves (before the uint8 frames round them): the
// DiT at batch 3 against batch 1, on the tiny Wan model. Not bitwise on CPU
// (LibTorch 1.13, OpenBLAS): a GEMM over more rows accumulates in another
// order. Measured max |diff| ≈ 1.2e-5 on latents of magnitude ~1.
TEST(BatchEngine, BatchedLatentsStayWithinTheMeasuredTolerance) {
  if (!io::Tokenizer::available()) GTEST_SKIP() << "built without OMNI_WITH_TOKENIZER";
  EngineArgs args;
  args.model = tiny_shapes_dir();
  args.device = "cpu";
  Omni omni(args);
  auto& pipe = dynamic_cast<pipelines::WanPipeline&>(omni.pipeline());
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> cond, uncond, noise;
  for (const auto& r : batch_requests()) {
    cond.push_back(pipe.encode_prompt({r.prompt}, torch::kCPU));
    uncond.push_back(pipe.encode_prompt({r.negative_prompt}, torch::kCPU));
    noise.push_back(pipe.prepare_latents(1, 32, 32, 5, r.seed, torch::kCPU));
  }
  pipelines::DenoiseArgs d;
  d.steps = 3;
  d.guidance_scale = 4.0;
  d.guidance_scale_2 = 3.0;
  const auto batched =
      pipe.denoise(torch::cat(cond), torch::cat(uncond), torch::cat(noise), d).latents;
  for (std::size_t i = 0; i < noise.size(); ++i) {
    const auto single = pipe.denoise(cond[i], uncond[i], noise[i], d).latents;
    const auto row = batched.narrow(0, static_cast<std::int64_t>(i), 1);
    const float diff = (row - single).abs().max().item<float>();
    EXPECT_LE(diff, 1e-4f) << "request " << i;
    std::cout << "[ measured ] request " << i << ": max |latents diff| " << diff
              << " (max |latent| " << single.abs().max().item<float>() << ")\n";
  }
}

// One request cancelled mid-batch: it is discarded, the others finish with
// the frames they get alone.
TEST(BatchEngine, CancellingOneRequestLeavesTheOthers) {
  Omni omni(batch_engine_args("example:wan-shaped"));
  const auto requests = batch_requests(4);
  const auto second_alone = omni.generate(requests[2]);
  int calls_after_cancel = 0;
  std::vector<pipelines::ProgressFn> progress(3);
  progress[1] = [&](int step, int) {
    if (step >= 2) {
      ++calls_after_cancel;
      throw Cancelled("the client went away");
    }
  };
  const auto outcomes = omni.generate_batch(requests, progress);
  ASSERT_TRUE(outcomes[1].error);
  EXPECT_THROW(std::rethrow_exception(outcomes[1].error), Cancelled);
  EXPECT_EQ(calls_after_cancel, 1) << "a cancelled request's callback is not called again";
  ASSERT_FALSE(outcomes[0].error);
  ASSERT_FALSE(outcomes[2].error);
  EXPECT_EQ(outcomes[2].result.batch_size, 3u);
  EXPECT_TRUE(torch::equal(outcomes[2].result.frames, second_alone.frames));
}

TEST(BatchEngine, CancellingEveryRequestStopsTheRun) {
  Omni omni(batch_engine_args("example:wan-shaped"));
  const auto requests = batch_requests(6);
  int last_step = 0;
  const pipelines::ProgressFn cancel_at_two = [&](int step, int) {
    last_step = std::max(last_step, step);
    if (step >= 2) throw Cancelled("shutdown");
  };
  const auto outcomes =
      omni.generate_batch(requests, std::vector<pipelines::ProgressFn>(3, cancel_at_two));
  for (const auto& o : outcomes) EXPECT_TRUE(o.error);
  EXPECT_EQ(last_step, 2) << "the run went on after every request was cancelled";
  // The engine stays usable.
  EXPECT_EQ(omni.generate(requests[0]).frames.size(0), 5);
}

// A batch that fails is run again request by request: only the request that
// fails alone fails (the fault here: request 0's callback throws an error
// that is not a cancellation, in the batch and alone).
TEST(BatchEngine, AFailureInsideABatchFailsOnlyItsOwnRequest) {
  Omni omni(batch_engine_args("example:wan-shaped"));
  auto requests = batch_requests(2);
  requests.push_back(requests[0]);
  requests.back().width = 33;  // invalid: fails alone before anything runs
  std::vector<pipelines::ProgressFn> progress(4);
  progress[0] = [](int, int) { throw std::runtime_error("injected fault"); };
  const auto outcomes = omni.generate_batch(requests, progress);
  ASSERT_TRUE(outcomes[0].error);
  EXPECT_THROW(std::rethrow_exception(outcomes[0].error), std::runtime_error);
  ASSERT_TRUE(outcomes[3].error);
  EXPECT_THROW(std::rethrow_exception(outcomes[3].error), InvalidRequest);
  for (std::size_t i : {1u, 2u}) {
    ASSERT_FALSE(outcomes[i].error) << "request " << i;
    EXPECT_EQ(outcomes[i].result.batch_size, 1u) << "run alone after the batch failed";
    EXPECT_TRUE(torch::equal(outcomes[i].result.frames, omni.generate(requests[i]).frames));
  }
}

TEST(BatchEngine, RequestsOfDifferentShapesRunOneAfterAnother) {
  Omni omni(batch_engine_args("example:wan-shaped"));
  auto requests = batch_requests(2);
  requests[1].steps = 3;
  const auto outcomes = omni.generate_batch(requests);
  for (const auto& o : outcomes) {
    ASSERT_FALSE(o.error);
    EXPECT_EQ(o.result.batch_size, 1u);
  }
  EXPECT_TRUE(torch::equal(outcomes[1].result.frames, omni.generate(requests[1]).frames));
}

// Omni::set_lookahead: the next request's calls follow this one's on the
// offload schedule, so its encoder arrives while this one decodes (on a
// paced sim link), and the next request then uploads no encoder of its own:
// its report counts the one prefetched for it, this one's does not (Note
// [Transfers for the next request]). With its prompts in the prompt cache
// it adds no encoder call.
TEST(BatchEngine, TheNextRequestsEncoderIsPrefetchedDuringThisOne) {
  const auto requests = batch_requests(2);
  const auto text_encoder_where = [](Omni& omni) {
    const auto& ledger = omni.backend()->ledger();
    return ledger.where(*ledger.find("text_encoder"));
  };
  {
    Omni omni(batch_engine_args("example:wan-shaped", /*link_gbps=*/1.0));
    omni.set_lookahead({requests[1]});
    const auto first = omni.generate(requests[0]);
    EXPECT_NE(text_encoder_where(omni), offload::Residency::host)
        << "the next request's encoder is not on its way when this one ends";
    EXPECT_EQ(uploads_of(first.report, "text_encoder"), 1u) << "its own encoder only";
    const auto second = omni.generate(requests[1]);
    EXPECT_EQ(uploads_of(second.report, "text_encoder"), 1u) << "the prefetched one, no other";
    EXPECT_EQ(second.report.component("text_encoder")->upload_bytes,
              second.report.component("text_encoder")->bytes);
    EXPECT_TRUE(second.text_encoder_ran());
  }
  {
    Omni omni(batch_engine_args("example:wan-shaped", /*link_gbps=*/1.0));
    (void)omni.generate(requests[0]);
    EXPECT_EQ(text_encoder_where(omni), offload::Residency::host) << "no lookahead, no prefetch";
  }
  {
    auto args = batch_engine_args("example:wan-shaped", /*link_gbps=*/1.0);
    args.prompt_cache_bytes = 64 << 20;
    Omni omni(args);
    (void)omni.generate(requests[1]);  // its prompts are cached now
    omni.set_lookahead({requests[1]});
    (void)omni.generate(requests[0]);
    EXPECT_EQ(text_encoder_where(omni), offload::Residency::host)
        << "an encoder the next request will not call was prefetched";
  }
}

}  // namespace
}  // namespace omni
