// Fuzzes a sharded checkpoint's *.safetensors.index.json: written next to two
// real shards (made once with save_safetensors), opened with
// Checkpoint::open_index and every mapped tensor viewed. Expected: a
// FormatError, or a checkpoint whose every name resolves to a tensor.
#include <cstddef>
#include <cstdint>

#include "fuzz_input.h"
#include "omni/error.h"
#include "omni/io/checkpoint.h"
#include "omni/io/safetensors.h"

namespace {

const std::filesystem::path& checkpoint_dir() {
  static const omni::fuzz::ScratchDir dir("safetensors_index");
  static const bool shards_written = [] {
    omni::io::save_safetensors(dir.path() / "model-00001-of-00002.safetensors",
                               {{"a.weight", torch::arange(4, torch::kFloat32).reshape({2, 2})},
                                {"a.bias", torch::ones({2})}});
    omni::io::save_safetensors(dir.path() / "model-00002-of-00002.safetensors",
                               {{"b.weight", torch::zeros({3}, torch::kFloat16)}});
    return true;
  }();
  (void)shards_written;
  return dir.path();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto index = checkpoint_dir() / "model.safetensors.index.json";
  omni::fuzz::write_file(index, data, size);
  try {
    const auto ckpt = omni::io::Checkpoint::open_index(index);
    std::uint64_t bytes = 0;
    for (const auto& name : ckpt.names()) {
      const auto view = ckpt.view(name);
      bytes += view.nbytes();
    }
    if (bytes != ckpt.total_bytes()) __builtin_trap();
  } catch (const omni::FormatError&) {
  }
  return 0;
}
