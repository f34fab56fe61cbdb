#include "omni/device/cpu_threads.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

#include <ATen/Parallel.h>

namespace omni::device {

// Note [CPU threads and BLAS]
// LibTorch runs CPU kernels on its intra-op pool (OpenMP), and its matrix
// products call BLAS. Debian's LibTorch uses OpenBLAS (libopenblas0-pthread),
// which starts its own pool of one thread per core. On a 2-core machine with
// both pools at 2, OpenMP's workers spin while OpenBLAS works and the two
// pools fight for the cores: generation ran 3.7x slower than with OpenBLAS on
// one thread (issue 32; `omni bench threads` measures it side by side). So
// the runtime puts OpenBLAS on one thread: LibTorch still splits the work
// across cores above it. OpenBLAS is looked up at run time
// (openblas_set_num_threads), so another BLAS (PyPI torch's MKL, which
// follows the intra-op setting) simply lacks the symbol. An environment that
// sets OPENBLAS_NUM_THREADS or OMP_NUM_THREADS has chosen, and is left alone.

namespace {

using SetThreads = void (*)(int);
using GetThreads = int (*)();

SetThreads openblas_setter() {
  return reinterpret_cast<SetThreads>(::dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
}

GetThreads openblas_getter() {
  return reinterpret_cast<GetThreads>(::dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
}

}  // namespace

CpuThreads cpu_threads() {
  CpuThreads now;
  now.intra_op = at::get_num_threads();
  if (auto* get = openblas_getter(); get && openblas_setter()) now.blas = get();
  return now;
}

void set_cpu_threads(CpuThreads threads) {
  if (threads.intra_op > 0) at::set_num_threads(threads.intra_op);
  if (auto* set = openblas_setter(); set && threads.blas > 0) set(threads.blas);
}

CpuThreads default_cpu_threads() {
  CpuThreads out = cpu_threads();
  if (out.blas > 0) out.blas = 1;
  return out;
}

void apply_default_cpu_threads() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (std::getenv("OPENBLAS_NUM_THREADS") || std::getenv("OMP_NUM_THREADS")) return;
    set_cpu_threads(default_cpu_threads());
  });
}

}  // namespace omni::device
