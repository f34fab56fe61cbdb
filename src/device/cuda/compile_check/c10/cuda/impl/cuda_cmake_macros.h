// Stand-in for the header a CUDA build of LibTorch generates; Debian's
// CPU-only libtorch-dev ships c10/cuda but not this file. Used only by the
// compile-only check (OMNI_CUDA_COMPILE_CHECK), never by a real build.
#pragma once
#define C10_CUDA_BUILD_SHARED_LIBS
