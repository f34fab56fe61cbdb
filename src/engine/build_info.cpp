#include "omni/build_info.h"

#include <torch/version.h>

#ifdef OMNI_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

// OMNI_VERSION comes from CMake's project(VERSION) (src/CMakeLists.txt).
#ifndef OMNI_VERSION
#error "OMNI_VERSION is not defined"
#endif

namespace omni {

BuildInfo build_info() {
  BuildInfo info;
  info.omni_version = OMNI_VERSION;
  info.torch_version = TORCH_VERSION;
  info.torch_major = TORCH_VERSION_MAJOR;
  info.torch_minor = TORCH_VERSION_MINOR;
#ifdef OMNI_WITH_CUDA
  // CUDART_VERSION is major * 1000 + minor * 10 (13000 for 13.0).
  info.cuda_version =
      std::to_string(CUDART_VERSION / 1000) + "." + std::to_string(CUDART_VERSION % 1000 / 10);
#endif
  return info;
}

std::string version_line() {
  const BuildInfo info = build_info();
  return "omni " + info.omni_version + " (LibTorch " + info.torch_version + ", " +
         (info.cuda_version.empty() ? std::string("no CUDA") : "CUDA " + info.cuda_version) + ")";
}

}  // namespace omni
