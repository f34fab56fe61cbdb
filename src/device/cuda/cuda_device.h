// The cuda device (OMNI_WITH_CUDA builds only).
#pragma once

#include <memory>

#include "omni/device/device.h"

namespace omni::device::cuda {

int cuda_device_count();
std::unique_ptr<Device> make_cuda_device(int index, const DeviceOptions& options);

}  // namespace omni::device::cuda
