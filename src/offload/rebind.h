// Pointing a live parameter at other data without changing its identity.
#pragma once

#include <torch/types.h>

namespace omni::offload {

// Makes `live` (every handle sharing its TensorImpl, including the module's
// members) refer to `data`: its storage, sizes, strides, dtype and device.
// Like Python's `p.data = data`, but also accepts the sim device's unusable
// placeholders, which set_data() refuses (see Note [Unusable placeholders]).
inline void rebind(const torch::Tensor& live, const torch::Tensor& data) {
  live.unsafeGetTensorImpl()->shallow_copy_from(data.getIntrusivePtr());
}

}  // namespace omni::offload
