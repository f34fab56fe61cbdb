// The mover (design.md §2b): uploads and releases the block groups of a
// component between its host home and device buffers, on the device's
// transfer stream, and owns the lifetimes that asynchronous copies need.
//
//   Mover mover(device);
//   auto group = mover.upload(home, g);   // enqueued; tensors point at the device copy
//   auto waited = mover.wait(group);      // compute waits for this group's copy only
//   mover.release(home, g, group);        // zero bytes go back
//
// Note [Lifetimes of copies in flight]
// A copy reads its host range and writes its device buffer after upload()
// has returned. The buffer lives in the group (and on sim in the copy
// itself) until the group is released; a host range that must go earlier (a
// static component's home, dropped once it is on the device; homes dropped by
// a rollback) is handed to keep_until_copied(), which holds it until a fence
// made after every copy enqueued so far is done. drain() waits for all of
// them; the backend calls it before homes or the device go away.
//
// Threading: the host thread that drives the backend.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "omni/device/device.h"
#include "omni/offload/host_home.h"

namespace omni::offload {

// One block group's device copy while it is resident.
struct ResidentGroup {
  torch::Tensor buffer;                          // undefined while at home
  std::shared_ptr<device::UploadFence> fence;    // after its copy
  std::unique_ptr<device::TransferTimer> timer;  // link time of its copy
  std::uint64_t bytes = 0;                       // moved host→device
  bool pinned = true;                            // every byte came from page-locked memory
  bool ready = false;                            // compute has waited for the copy
  bool resident() const { return buffer.defined(); }
};

class Mover {
 public:
  explicit Mover(device::Device& device) : device_(device) {}
  ~Mover();  // drain()
  Mover(const Mover&) = delete;
  Mover& operator=(const Mover&) = delete;

  // Allocates group `g` of `home` on the device, enqueues its copy and points
  // its tensors at the device copy. Usable by compute after wait(). Throws
  // DeviceOutOfMemory with nothing changed.
  ResidentGroup upload(HostHome& home, std::size_t g);
  // Makes compute wait for the group's copy; the measured wait is the
  // exposed transfer (nullptr when compute had already waited for it).
  std::unique_ptr<device::DeviceDuration> wait(ResidentGroup& group);
  // Points the group's tensors back at their offloaded views (at the home
  // itself when `at_home`: teardown, for code that runs without offload)
  // and drops the device copy. Copies nothing back.
  void release(HostHome& home, std::size_t g, ResidentGroup& group, bool at_home = false);
  // Keeps `owner` alive until every copy enqueued so far is done.
  void keep_until_copied(std::shared_ptr<const void> owner);
  // Blocks until every copy is done and lets go of what was kept for them.
  void drain() noexcept;

 private:
  void prune();
  device::Device& device_;
  std::vector<std::pair<std::shared_ptr<device::UploadFence>, std::shared_ptr<const void>>> kept_;
};

}  // namespace omni::offload
