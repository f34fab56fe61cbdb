#include "testing/fault_injection.h"

#include <atomic>
#include <mutex>

namespace omni::fault {
namespace {

std::atomic<bool> g_armed{false};
std::mutex g_mutex;
Faults g_faults;

}  // namespace

Faults armed_faults() {
  if (!g_armed.load(std::memory_order_relaxed)) return {};
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_faults;
}

ScopedFaults::ScopedFaults(const Faults& faults) {
  std::lock_guard<std::mutex> lock(g_mutex);
  previous_ = g_faults;
  previously_armed_ = g_armed.load();
  g_faults = faults;
  g_armed.store(true);
}

ScopedFaults::~ScopedFaults() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_faults = previous_;
  g_armed.store(previously_armed_);
}

}  // namespace omni::fault
