// The accelerator abstraction (design.md §3): where weights live while a
// component runs, how host memory is page-locked, and how bytes move.
//
//   auto device = omni::device::make_device(omni::device::DeviceSpec::parse("sim"), options);
//   auto buffer = device->allocate(bytes);                  // device memory for weights
//   device->copy_to_device(buffer, 0, host_ptr, bytes, pinned); // async on the transfer stream
//   auto fence = device->fence_uploads();                   // a point after that copy
//   auto waited = device->wait_for(fence);                  // compute waits on it (an event)
//   waited->seconds();                                      // how long compute waited: exposed
//
// Kinds:
//   cuda[:N]  the real thing (OMNI_WITH_CUDA builds only).
//   sim       a host-backed stand-in: resident weights are separate host
//             buffers counted against a capacity, and offloaded weights are
//             placeholders that make any computation fail loudly.
//   cpu       no accelerator: offload is a no-op.
//   auto      cuda:0 when present, else cpu; sim when offload is enabled.
#pragma once

#include <torch/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace omni::device {

enum class DeviceKind { automatic, cpu, sim, cuda };

struct DeviceSpec {
  DeviceKind kind = DeviceKind::automatic;
  int index = 0;
  // Parses "auto", "cpu", "sim", "cuda", "cuda:N"; ConfigError otherwise.
  static DeviceSpec parse(std::string_view text);
  std::string to_string() const;
};

struct DeviceOptions {
  // Capacity of the sim device in bytes (weights only). Default 64 GiB.
  std::uint64_t sim_memory_bytes = 64ull << 30;
  // Speed of the sim device's host→device link in GB/s (Note [The sim link]);
  // 0: as fast as the host's memcpy.
  double sim_link_gbps = 0;
};

struct MemoryStats {
  std::uint64_t allocated_bytes = 0;  // device bytes this process has handed out now
  std::uint64_t peak_allocated_bytes = 0;
  std::uint64_t capacity_bytes = 0;  // 0 when unknown
  // What the device could still hand out, to us or other programs (cuda);
  // 0 when it does not say (sim: capacity minus allocated is what is left).
  std::uint64_t free_bytes = 0;
  // Bytes this process's allocator holds, handed out or cached for reuse
  // (cuda's reserved memory, which free_bytes does not count); sim: the
  // allocated bytes. free + reserved is what this process could use.
  std::uint64_t reserved_bytes = 0;
};

// A duration measured on the device; seconds() may wait until it is known.
class DeviceDuration {
 public:
  virtual ~DeviceDuration() = default;
  virtual double seconds() = 0;
};

// A timed transfer: the time the link spent on the copies enqueued between
// start_transfer_timer() and stop(); seconds() may wait for them to finish.
class TransferTimer : public DeviceDuration {
 public:
  // Marks the end of the timed transfers (after they were enqueued).
  virtual void stop() = 0;
};

// A point on the transfer stream, after every copy enqueued before it was
// made. It may outlive the call that made it but not the device.
class UploadFence {
 public:
  virtual ~UploadFence() = default;
  // True once every copy before the fence has completed. Never blocks.
  virtual bool done() = 0;
  // Blocks the calling host thread until done().
  virtual void synchronize() = 0;
};

class Device {
 public:
  virtual ~Device() = default;

  virtual DeviceKind kind() const = 0;
  // "cuda:0", "sim", "cpu".
  virtual std::string name() const = 0;
  // Where activations and compute run (cpu for sim and cpu).
  virtual torch::Device compute_device() const = 0;
  // True for the sim stand-in: every figure it reports is simulated.
  virtual bool is_stand_in() const { return false; }
  // True when offload means something (not cpu).
  virtual bool supports_offload() const { return true; }

  // Page-locks [ptr, ptr+bytes) for fast async uploads. Returns a handle
  // that unpins when destroyed (it may outlive the device), or nullptr when
  // the host refuses (the caller falls back to pageable memory). Host thread.
  virtual std::shared_ptr<void> pin_host(void* ptr, std::size_t bytes) = 0;

  // Device memory for weights: a uint8 tensor of `bytes` on the device.
  // Throws DeviceOutOfMemory when it does not fit.
  virtual torch::Tensor allocate(std::size_t bytes) = 0;

  // Enqueues a host→device copy into buffer[offset, offset+bytes) on the
  // transfer stream and returns at once. `src_pinned` says whether src lies
  // in page-locked memory. The caller keeps the source and the buffer alive
  // until a fence made after the copy is done (offload::Mover does that).
  virtual void copy_to_device(torch::Tensor& buffer, std::size_t offset, const void* src,
                              std::size_t bytes, bool src_pinned) = 0;

  // A fence after every copy enqueued so far. Host thread.
  virtual std::shared_ptr<UploadFence> fence_uploads() = 0;

  // Makes compute wait for `fence` (cuda: the compute stream waits on its
  // event and the host goes on; sim: the calling thread, which is where sim
  // computes, blocks). Returns how long compute waited: the transfer time
  // exposed to compute. Host thread.
  virtual std::unique_ptr<DeviceDuration> wait_for(const std::shared_ptr<UploadFence>& fence) = 0;

  // Starts timing transfers enqueued from now on, until timer->stop().
  virtual std::unique_ptr<TransferTimer> start_transfer_timer() = 0;

  // Marks a buffer that compute used so its memory is not reused before that
  // compute finished (record_stream); then the caller drops its reference.
  virtual void retire(torch::Tensor& buffer) = 0;

  // What a parameter points to while its component is offloaded. On cuda it
  // is the host home itself; on sim an unusable placeholder of the same shape.
  virtual torch::Tensor offloaded_view(const torch::Tensor& home) = 0;

  // Blocks until all device work is done.
  virtual void synchronize() = 0;

  virtual MemoryStats memory_stats() const = 0;
  virtual void reset_peak() = 0;
};

// Creates the device for a spec. `offload_enabled` resolves `auto`.
// ConfigError when the kind is unavailable (cuda without an OMNI_WITH_CUDA build).
std::unique_ptr<Device> make_device(const DeviceSpec& spec, bool offload_enabled,
                                    const DeviceOptions& options = {});

// True when a CUDA device is usable in this build and process.
bool cuda_available();

// Parses sizes such as "2GiB", "512MiB", "1.5GB", "1048576"; ConfigError otherwise.
std::uint64_t parse_byte_size(std::string_view text);
// 1536 → "1.50 KiB".
std::string format_bytes(std::uint64_t bytes);

// Placeholder tensors on the sim device (see Note [Unusable placeholders]).
torch::Tensor make_unusable_placeholder(const torch::Tensor& like);
bool is_unusable_placeholder(const torch::Tensor& t);

}  // namespace omni::device
