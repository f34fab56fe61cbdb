// LibTorch's errors from inside a generation, as omni's typed errors.
#pragma once

#include <c10/util/Exception.h>

namespace omni::engine {

// Rethrows `e` as the omni error it stands for, or rethrows the exception
// being handled as it is. Call it only inside the handler that caught `e`:
// - the allocator out of memory (c10::OutOfMemoryError: CUDA's caching
//   allocator during compute) → DeviceOutOfMemory (M5 of the GPU review);
// - a PrivateUse1 dispatch error → NonResidentWeightAccess (Note [Unusable
//   placeholders], device.cpp: an operator read an offloaded weight on sim).
[[noreturn]] void rethrow_torch_error(const c10::Error& e);

}  // namespace omni::engine
