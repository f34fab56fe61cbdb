// OffloadReport: what moved, when, how fast, and what it cost in memory
// (design.md §2 rule 8). Printable as a table and as JSON.
//
// Note [Exposed and hidden transfer]
// A component's upload seconds are the time the link spent on its copies.
// The part compute waited for (a block whose copy had not landed when the
// block was about to run) is exposed: it adds to the request's time. The
// rest ran beside compute and is hidden. Whole-component swaps expose all of
// it; streaming (backend.h) hides what the blocks' compute covers. A wait
// longer than the copies (a thread's wake-up on a busy host) counts only up
// to the link's time, so exposed + hidden = upload seconds.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "omni/offload/components.h"
#include "omni/offload/host_memory_plan.h"

namespace omni::offload {

enum class Direction { h2d, d2h };
std::string_view to_string(Direction direction);

struct Transfer {
  std::string component;
  Direction direction = Direction::h2d;
  std::uint64_t bytes = 0;
  double seconds = 0;
  bool pinned = true;  // every source byte came from page-locked memory
  double gbps() const { return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0; }
};

struct ComponentReport {
  std::string name;
  Role role = Role::dit;
  std::uint64_t bytes = 0;
  std::uint64_t uploads = 0;
  std::uint64_t offloads = 0;
  double upload_seconds = 0;
  std::uint64_t upload_bytes = 0;
  // Note [Exposed and hidden transfer]: of upload_seconds, how long compute
  // waited for this component's copies; the rest ran beside compute.
  double exposed_seconds = 0;
  Residency where = Residency::host;
  bool swappable = false;
  double gbps() const {
    return upload_seconds > 0 ? static_cast<double>(upload_bytes) / upload_seconds / 1e9 : 0;
  }
  double hidden_seconds() const { return std::max(0.0, upload_seconds - exposed_seconds); }
};

// A LoRA fused into a component's weights at load (models/wan/wan_lora.h,
// Note [Fusing a LoRA]): the home holds the fused weights, so it moves no
// extra byte.
struct FusedLora {
  std::string component;
  std::string path;
  double scale = 1.0;
  std::string style;               // the file's key style(s)
  std::uint64_t tensors = 0;       // the component's tensors it changed
  std::uint64_t pairs = 0;         // the file's updates
  std::uint64_t unused_pairs = 0;  // of those, matching no tensor
};

struct OffloadReport {
  std::string device;
  bool stand_in = false;   // figures come from the sim device
  std::string strategy;    // "model-level", "all-resident", "none"
  bool streaming = false;  // model-level with Note [Streaming model-level offload]
  std::uint64_t peak_resident_bytes = 0;
  std::uint64_t planned_peak_bytes = 0;  // with the strategy in use
  std::uint64_t planned_peak_without_offload_bytes = 0;
  std::uint64_t pinned_host_bytes = 0;
  std::uint64_t pageable_host_bytes = 0;
  // Note [Mapped homes]: bytes of homes left in the mapped checkpoint, the
  // pinned staging ring they upload through, and the plan (absent when the
  // engine made none).
  std::uint64_t mapped_host_bytes = 0;
  std::uint64_t staging_host_bytes = 0;
  std::optional<HostMemoryPlan> host_plan;
  std::uint64_t h2d_bytes = 0;
  std::uint64_t d2h_bytes = 0;
  std::uint64_t device_peak_allocated_bytes = 0;  // from the device's own statistics
  double exposed_transfer_seconds = 0;            // Note [Exposed and hidden transfer]
  double hidden_transfer_seconds = 0;
  std::vector<ComponentReport> components;
  std::vector<Transfer> transfers;
  std::vector<FusedLora> loras;  // in the order they were fused

  const ComponentReport* component(std::string_view name) const;
  std::string to_table() const;
  nlohmann::json to_json() const;
};

}  // namespace omni::offload
