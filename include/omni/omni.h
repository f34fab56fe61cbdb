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
#include "omni/offload/backend.h"
#include "omni/offload/report.h"
#include "omni/pipelines/pipeline.h"
#include "omni/pipelines/prompt_cache.h"

namespace omni {

using pipelines::GenerationRequest;

struct EngineArgs {
  std::string model = "example:wan-shaped";
  bool enable_cpu_offload = false;
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
  device::FaultInjection faults;  // tests only
  // Throws ConfigError naming the bad field.
  void validate() const;
};

struct GenerateResult {
  torch::Tensor frames;  // uint8 [F, H, W, 3]
  int fps = 16;
  GenerationRequest request;      // with defaults filled in
  offload::OffloadReport report;  // this request only
  double seconds = 0;
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

  // Everything since load.
  offload::OffloadReport offload_report();
  // The prompt cache's counters since load. Thread-safe.
  pipelines::PromptCacheStats prompt_cache_stats() const { return prompt_cache_.stats(); }
  const EngineArgs& args() const { return args_; }
  device::Device& device() { return *device_; }
  pipelines::Pipeline& pipeline() { return *pipeline_; }
  offload::OffloadBackend* backend() { return backend_.get(); }
  // The host memory plan made before loading (absent without a budget).
  const std::optional<offload::HostMemoryPlan>& host_plan() const { return host_plan_; }

 private:
  EngineArgs args_;
  std::unique_ptr<device::Device> device_;
  std::shared_ptr<pipelines::Pipeline> pipeline_;
  std::optional<offload::HostMemoryPlan> host_plan_;
  std::unique_ptr<offload::OffloadBackend> backend_;
  pipelines::PromptCache prompt_cache_;
  void add_host_plan(offload::OffloadReport& report) const;
};

}  // namespace omni
