// What this build of omni was compiled with: compile-time facts only (no
// device is touched, nothing is loaded), for `omni --version`, the Python
// module's import check and bug reports.
#pragma once

#include <string>

namespace omni {

struct BuildInfo {
  std::string omni_version;   // the project's version, "0.1.0"
  std::string torch_version;  // the LibTorch headers' TORCH_VERSION, "2.15.0"
  int torch_major = 0;        // TORCH_VERSION_MAJOR
  int torch_minor = 0;        // TORCH_VERSION_MINOR
  // The CUDA toolkit the CUDA device was compiled against (CUDART_VERSION),
  // "13.0"; empty in a build without the CUDA device.
  std::string cuda_version;
};

// This build's facts. Any thread.
BuildInfo build_info();

// One line for `omni --version`: "omni 0.1.0 (LibTorch 2.15.0, CUDA 13.0)", or
// "... (LibTorch 1.13.1, no CUDA)". Any thread.
std::string version_line();

}  // namespace omni
