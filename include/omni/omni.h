// omni::Omni — the engine facade: load a model, choose the device, enable
// offload, generate, report. Mirrors the seed's Python API:
//
//   omni::Omni omni({.model = "example:wan-shaped", .enable_cpu_offload = true});
//   auto out = omni.generate({.prompt = "a red circle moving right", .seed = 7});
//   out.save("out.png");
//   std::cout << omni.offload_report().to_table();
//
// Threading: one Omni is driven by one thread at a time.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "omni/device/device.h"
#include "omni/models/wan/wan_lora.h"
#include "omni/offload/auto_plan.h"
#include "omni/offload/backend.h"
#include "omni/offload/report.h"
#include "omni/pipelines/pipeline.h"
#include "omni/pipelines/prompt_cache.h"

namespace omni {

using pipelines::GenerationRequest;

struct EngineArgs {
  std::string model = "example:wan-shaped";
  bool enable_cpu_offload = false;
  // DiT blocks stream through every call (--enable-layerwise-offload): for a
  // device smaller than one DiT. offload.prefetch_blocks is --prefetch-blocks.
  bool enable_layerwise_offload = false;
  // --offload auto: the mode is chosen from the component sizes and the
  // budget (Note [Choosing an offload mode]); the flags above are ignored.
  bool offload_auto = false;
  std::string device = "auto";  // auto | cpu | sim | cuda[:N]
  // auto (each component's stored dtype) | float32 | bfloat16 | float16, or
  // per component: "transformer=bfloat16,vae=float32" (Note [Dtype from the checkpoint]).
  std::string dtype = "auto";
  // Tiled VAE decode/encode above one tile (Note [Tiled VAE]); --vae-tiling.
  bool vae_tiling = true;
  std::uint64_t sim_memory_bytes = 64ull << 30;
  // The sim device's link speed in GB/s (Note [The sim link]); 0: memcpy speed.
  double sim_link_gbps = 0;
  // offload.streaming (default on) is --offload-streaming.
  // Host memory for weights with offload (Note [Mapped homes]): components
  // whose homes do not fit keep them in the mapped checkpoint and upload
  // through a pinned staging ring of `pinned_staging_bytes` (part of the
  // budget). nullopt: no budget, every home pinned.
  std::optional<std::uint64_t> host_memory_budget_bytes;
  std::uint64_t pinned_staging_bytes = 512ull << 20;
  // Text-encoder outputs kept for reuse (Note [Prompt cache]); 0: none.
  std::uint64_t prompt_cache_bytes = 256ull << 20;
  offload::OffloadOptions offload;
  // LoRAs fused into their components' weights at load, in order, before
  // offload makes the host homes (Note [Fusing a LoRA]); --lora.
  std::vector<models::wan::LoraSpec> loras;
  // Throws ConfigError naming the bad field.
  void validate() const;
  // layerwise with enable_layerwise_offload; else budget when
  // offload.device_memory_budget is set (it implies offload); else
  // model-level with enable_cpu_offload; else all-resident.
  offload::PolicyKind offload_policy() const;
};

struct GenerateResult {
  torch::Tensor frames;  // uint8 [F, H, W, 3]
  int fps = 16;
  GenerationRequest request;      // with defaults filled in
  offload::OffloadReport report;  // this request only
  double seconds = 0;
  // How many requests ran together with this one (itself included); >1 only
  // from generate_batch. A batch's report and prompt cache counts are the
  // whole batch's, in each of its results.
  std::size_t batch_size = 1;
  // This request's prompt encodings: taken from the prompt cache, or run
  // through the text encoder (pipelines that encode no prompt count none).
  std::uint64_t prompt_cache_hits = 0;
  std::uint64_t prompt_cache_misses = 0;
  bool text_encoder_ran() const { return prompt_cache_misses > 0; }
  // The report as `omni generate --report-json` writes it (and the Python
  // API returns it): the offload report, the request's seconds and seed, and
  // what the prompt cache did.
  nlohmann::json report_json() const;
  // Writes frames (see io::write_frames); returns the files written.
  std::vector<std::filesystem::path> save(const std::filesystem::path& path) const;
};

// One request's fate in Omni::generate_batch: its result, or what it threw.
struct BatchOutcome {
  GenerateResult result;     // when error is null
  std::exception_ptr error;  // InvalidRequest, Cancelled, DeviceOutOfMemory, …
  double seconds = 0;        // from the batch's start to this request's end
};

// Note [Batched generation]
// generate_batch runs requests that the pipeline gives the same batch key
// as one phase-batched run (Note [Phase-batched runs], pipeline.h): each
// expert is uploaded once for all of them, and each request still gets its
// own seed's frames (up to the DiT's last bits). Requests without a common
// key run one after another.
// - Each request has its own progress callback. One that throws Cancelled
//   cancels that request only: it goes on in the batch (its row is computed
//   to the end and discarded; removing it would change the others' batch
//   mid-run) and its outcome is the Cancelled error. Once every request of
//   the batch is cancelled, the run stops at its next step.
// - A batch that fails otherwise (out of memory with the larger batch, say)
//   is run again request by request, so a request fails only where it fails
//   alone; each outcome carries its own error.
// - An invalid request (resolve) fails alone before anything runs.

class Omni {
 public:
  explicit Omni(EngineArgs args);
  ~Omni();
  Omni(const Omni&) = delete;
  Omni& operator=(const Omni&) = delete;

  // Runs one request. InvalidRequest for bad values (nothing runs);
  // DeviceOutOfMemory, NonResidentWeightAccess, … otherwise. After an error
  // the engine stays usable.
  GenerateResult generate(const GenerationRequest& request,
                          const pipelines::ProgressFn& progress = {});

  // Note [Batched generation]. `progress` is empty or one callback per
  // request. Never throws for a request's failure; see BatchOutcome.
  std::vector<BatchOutcome> generate_batch(const std::vector<GenerationRequest>& requests,
                                           const std::vector<pipelines::ProgressFn>& progress = {});

  // Requests expected to run after the next generate / generate_batch (the
  // server's queue): their component calls follow that call's on the
  // offload schedule, so streaming prefetches for them: the next request's
  // text encoder uploads while this one's VAE decodes (Note [Streaming
  // model-level offload]). A request whose prompts are all in the prompt
  // cache adds no encoder call. Used by the next call only.
  void set_lookahead(std::vector<GenerationRequest> requests);

  // Everything since load.
  offload::OffloadReport offload_report();
  // The prompt cache's counters since load. Thread-safe.
  pipelines::PromptCacheStats prompt_cache_stats() const { return prompt_cache_.stats(); }
  const EngineArgs& args() const { return args_; }
  device::Device& device() { return *device_; }
  pipelines::Pipeline& pipeline() { return *pipeline_; }
  offload::OffloadBackend* backend() { return backend_.get(); }
  // What --offload auto chose and why; nullopt without it.
  const std::optional<offload::OffloadChoice>& offload_choice() const { return choice_; }
  // The host memory plan made before loading (absent without a budget).
  const std::optional<offload::HostMemoryPlan>& host_plan() const { return host_plan_; }
  // The LoRAs fused at load, in order.
  const std::vector<offload::FusedLora>& loras() const { return loras_; }

 private:
  // Runs resolved `results[i].request`s as one backend request (one
  // pipeline run, or run_batch for several) and fills in the results.
  void run_resolved(std::vector<GenerateResult>& results, const pipelines::ProgressFn& progress);
  // generate_batch's parts.
  std::vector<std::size_t> resolve_batch(const std::vector<GenerationRequest>& requests,
                                         std::vector<BatchOutcome>& outcomes,
                                         std::vector<GenerateResult>& results, bool& one_key,
                                         std::chrono::steady_clock::time_point start);
  void run_alone(const GenerationRequest& request, const pipelines::ProgressFn& progress,
                 BatchOutcome& outcome, std::chrono::steady_clock::time_point start);
  void run_batch(const std::vector<GenerationRequest>& requests,
                 const std::vector<pipelines::ProgressFn>& progress,
                 const std::vector<std::size_t>& members, std::vector<GenerateResult>& results,
                 std::vector<BatchOutcome>& outcomes, std::chrono::steady_clock::time_point start);

  EngineArgs args_;
  std::unique_ptr<device::Device> device_;
  std::shared_ptr<pipelines::Pipeline> pipeline_;
  std::optional<offload::HostMemoryPlan> host_plan_;
  std::unique_ptr<offload::OffloadBackend> backend_;
  std::optional<offload::OffloadChoice> choice_;
  offload::PolicyKind choose_policy();
  struct PlannedLora;
  std::vector<PlannedLora> plan_loras() const;
  void finish_loras(std::vector<PlannedLora>& plans);
  pipelines::PromptCache prompt_cache_;
  std::vector<GenerationRequest> lookahead_;
  std::vector<offload::FusedLora> loras_;
  // What loading decided, in every report: the host plan and the LoRAs.
  void add_load_facts(offload::OffloadReport& report) const;
};

}  // namespace omni
