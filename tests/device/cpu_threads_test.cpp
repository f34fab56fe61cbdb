#include "omni/device/cpu_threads.h"

#include <gtest/gtest.h>

#include <cstdlib>

using namespace omni::device;

namespace {

// Restores the process's threading when a test ends.
class ScopedCpuThreads {
 public:
  ScopedCpuThreads() : saved_(cpu_threads()) {}
  ~ScopedCpuThreads() { set_cpu_threads(saved_); }
  ScopedCpuThreads(const ScopedCpuThreads&) = delete;
  ScopedCpuThreads& operator=(const ScopedCpuThreads&) = delete;

 private:
  CpuThreads saved_;
};

}  // namespace

TEST(CpuThreads, SetsIntraOpAndOpenBlasThreads) {
  ScopedCpuThreads restore;
  set_cpu_threads({.intra_op = 1, .blas = 2});
  EXPECT_EQ(cpu_threads().intra_op, 1);
  if (cpu_threads().blas == 0) GTEST_SKIP() << "no OpenBLAS in this process (another BLAS)";
  EXPECT_EQ(cpu_threads().blas, 2);
  set_cpu_threads({.intra_op = 2, .blas = 1});
  EXPECT_EQ(cpu_threads().intra_op, 2);
  EXPECT_EQ(cpu_threads().blas, 1);
}

// Note [CPU threads and BLAS]: with no environment variable set, the runtime
// puts OpenBLAS on one thread and leaves LibTorch's intra-op pool as it is.
TEST(CpuThreads, TheDefaultPutsOpenBlasOnOneThreadWithoutAnEnvironmentVariable) {
  ScopedCpuThreads restore;
  if (std::getenv("OPENBLAS_NUM_THREADS") || std::getenv("OMP_NUM_THREADS"))
    GTEST_SKIP() << "the environment sets the threads: the runtime leaves them alone";
  if (cpu_threads().blas == 0) GTEST_SKIP() << "no OpenBLAS in this process (another BLAS)";
  set_cpu_threads({.intra_op = 2, .blas = 2});
  const int intra_op = cpu_threads().intra_op;
  apply_default_cpu_threads();
  EXPECT_EQ(cpu_threads().blas, 1);
  EXPECT_EQ(cpu_threads().intra_op, intra_op);
}
