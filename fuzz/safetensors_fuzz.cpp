// Fuzzes a .safetensors file: the header parser on the bytes in memory, then
// the same bytes as a file through read_safetensors_header (omni inspect) and
// SafetensorsFile::open (the loader), touching every byte of every tensor and
// building its view. Expected: a FormatError, or tensors that lie inside the
// mapping and agree with their dtype and shape.
#include <cstddef>
#include <cstdint>
#include <span>

#include "fuzz_input.h"
#include "omni/error.h"
#include "omni/io/safetensors.h"

using namespace omni::io;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    (void)parse_safetensors_header(bytes, size, "fuzz.safetensors");
  } catch (const omni::FormatError&) {
  }

  const omni::fuzz::MemFile file(bytes);
  try {
    (void)read_safetensors_header(file.path());
  } catch (const omni::FormatError&) {
  }
  try {
    const auto st = SafetensorsFile::open(file.path());
    unsigned checksum = 0;
    for (const auto& info : st->tensors()) {
      for (const std::byte b : st->bytes(info)) checksum += static_cast<unsigned>(b);
      const auto view = st->view(info);
      if (static_cast<std::uint64_t>(view.numel()) != info.numel() ||
          view.nbytes() != info.nbytes())
        __builtin_trap();  // the view disagrees with the validated header
      (void)view.clone();
    }
    volatile unsigned sink = checksum;
    (void)sink;
  } catch (const omni::FormatError&) {
  }
  return 0;
}
