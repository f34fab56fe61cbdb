// LibTorch's errors out of a generation become omni's typed errors
// (engine::rethrow_torch_error): an allocator OOM during compute is
// DeviceOutOfMemory (Python MemoryError, the server's typed answer), an
// offloaded weight read on sim is NonResidentWeightAccess, and anything
// else keeps its own type.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "engine/torch_errors.h"
#include "omni/error.h"

using namespace omni;

namespace {

// Throws `error`, catches it as c10::Error and hands it to the translation.
template <typename E>
void translate(E error) {
  try {
    throw error;
  } catch (const c10::Error& e) {
    engine::rethrow_torch_error(e);
  }
}

c10::SourceLocation here() {
  return {__func__, __FILE__, __LINE__};
}

}  // namespace

TEST(TorchErrors, AllocatorOutOfMemoryIsDeviceOutOfMemory) {
  try {
    translate(
        c10::OutOfMemoryError(here(), "CUDA out of memory. Tried to allocate 2.00 GiB\nmore"));
    FAIL() << "nothing thrown";
  } catch (const DeviceOutOfMemory& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("during compute"), std::string::npos) << what;
    EXPECT_NE(what.find("Tried to allocate 2.00 GiB"), std::string::npos) << what;
    EXPECT_EQ(what.find("more"), std::string::npos) << "only the first line: " << what;
  }
}

TEST(TorchErrors, PrivateUse1DispatchIsNonResidentWeightAccess) {
  EXPECT_THROW(translate(c10::Error(here(),
                                    "Could not run 'aten::mm' with arguments from the "
                                    "'PrivateUse1' backend.")),
               NonResidentWeightAccess);
}

TEST(TorchErrors, OtherErrorsKeepTheirType) {
  EXPECT_THROW(translate(c10::IndexError(here(), "index 9 is out of bounds")), c10::IndexError);
  EXPECT_THROW(translate(c10::Error(here(), "shape mismatch")), c10::Error);
}
