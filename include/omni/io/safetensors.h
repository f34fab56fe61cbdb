// safetensors: reading (mmap, validated header) and writing.
//
// Format: an 8-byte little-endian header length N, N bytes of JSON mapping
// tensor names to {dtype, shape, data_offsets:[begin,end]} (offsets relative to
// the byte after the header) plus an optional "__metadata__" string map, then
// the data. Every offset is checked against the file before any byte of data
// is read; nothing is ever read outside the mapping.
#pragma once

#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace omni::io {

enum class DType { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL };

// "F32" → DType::F32; FormatError for an unknown name.
DType dtype_from_string(std::string_view name, std::string_view context);
std::string_view to_string(DType dtype);
std::size_t element_size(DType dtype);
torch::ScalarType to_scalar_type(DType dtype);
DType from_scalar_type(torch::ScalarType type);

struct TensorInfo {
  std::string name;
  DType dtype;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;  // byte offsets relative to the data section
  std::uint64_t end = 0;
  std::uint64_t numel() const;
  std::uint64_t nbytes() const { return end - begin; }
};

struct SafetensorsHeader {
  std::uint64_t header_bytes = 0;   // N
  std::uint64_t data_offset = 0;    // 8 + N
  std::vector<TensorInfo> tensors;  // in data order
  std::map<std::string, std::string> metadata;
  const TensorInfo* find(std::string_view name) const;
};

// Largest header accepted (the format's own reference uses 100 MB).
inline constexpr std::uint64_t kMaxHeaderBytes = 100ull << 20;

// Validates and parses a header. `prefix` holds at least the first 8 + N bytes
// of the file (or the whole file); `file_size` is the file's real size.
// FormatError naming `file_label` (and the tensor, where one is at fault) on:
// header length beyond the file or above kMaxHeaderBytes, invalid JSON,
// invalid UTF-8 (with the byte offset), unknown dtype, bad shape, byte size ≠
// dtype × shape, offsets out of range or overlapping, duplicate names (which
// a JSON parser would otherwise silently merge). Gaps between tensors are
// allowed: nothing is read from them.
SafetensorsHeader parse_safetensors_header(std::span<const std::byte> prefix,
                                           std::uint64_t file_size, const std::string& file_label);

// Reads only the header of a file (no data is mapped): used by `omni inspect`.
SafetensorsHeader read_safetensors_header(const std::filesystem::path& path);

// A memory-mapped safetensors file. Tensors returned by view() alias the
// mapping and keep it alive. The mapping is private and copy-on-write: a
// write to a view changes this process's copy (a private page), never the
// file.
class SafetensorsFile : public std::enable_shared_from_this<SafetensorsFile> {
 public:
  static std::shared_ptr<SafetensorsFile> open(const std::filesystem::path& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  const SafetensorsHeader& header() const { return header_; }
  const std::vector<TensorInfo>& tensors() const { return header_.tensors; }
  const TensorInfo* find(std::string_view name) const { return header_.find(name); }

  // Raw bytes of one tensor inside the mapping.
  std::span<const std::byte> bytes(const TensorInfo& info) const;
  // Zero-copy CPU tensor over the mapping (copied only when misaligned).
  torch::Tensor view(const TensorInfo& info) const;
  // FormatError naming the file when the tensor is absent.
  torch::Tensor view(std::string_view name) const;

 private:
  SafetensorsFile() = default;
  std::filesystem::path path_;
  SafetensorsHeader header_;
  const std::byte* map_ = nullptr;
  std::size_t map_bytes_ = 0;
};

// Writes tensors (any device, any layout; copied to contiguous CPU) in the
// given order. Atomic: written to a temporary file, then renamed.
void save_safetensors(const std::filesystem::path& path,
                      const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Reads every tensor of a file into owning CPU tensors.
std::vector<std::pair<std::string, torch::Tensor>> load_safetensors(
    const std::filesystem::path& path);

}  // namespace omni::io
