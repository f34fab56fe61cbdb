// CPU threading of the compute libraries under LibTorch: its intra-op pool
// and the BLAS it calls (Note [CPU threads and BLAS]).
#pragma once

namespace omni::device {

struct CpuThreads {
  int intra_op = 1;  // LibTorch's intra-op threads (at::get_num_threads)
  // BLAS threads; 0 when the BLAS in this process cannot be set at run time
  // (no OpenBLAS: PyPI torch's MKL follows intra_op).
  int blas = 0;
};

// What the process runs with now.
CpuThreads cpu_threads();

// Sets both; `blas` is ignored where cpu_threads().blas is 0. Process-wide:
// call between generations, not during one.
void set_cpu_threads(CpuThreads threads);

// The runtime's setting: intra-op threads as LibTorch chose them, BLAS on one
// thread. Applied once per process by the first Omni (apply_default_cpu_threads),
// unless OPENBLAS_NUM_THREADS or OMP_NUM_THREADS is set: then the user chose.
CpuThreads default_cpu_threads();
void apply_default_cpu_threads();

}  // namespace omni::device
