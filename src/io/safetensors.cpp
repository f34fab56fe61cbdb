#include "omni/io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "omni/error.h"

namespace omni::io {

namespace {

struct DTypeEntry {
  DType dtype;
  std::string_view name;
  std::size_t size;
  torch::ScalarType scalar;
};

constexpr DTypeEntry kDTypes[] = {
    {DType::F64, "F64", 8, torch::kFloat64}, {DType::F32, "F32", 4, torch::kFloat32},
    {DType::F16, "F16", 2, torch::kFloat16}, {DType::BF16, "BF16", 2, torch::kBFloat16},
    {DType::I64, "I64", 8, torch::kInt64},   {DType::I32, "I32", 4, torch::kInt32},
    {DType::I16, "I16", 2, torch::kInt16},   {DType::I8, "I8", 1, torch::kInt8},
    {DType::U8, "U8", 1, torch::kUInt8},     {DType::BOOL, "BOOL", 1, torch::kBool},
};

const DTypeEntry& entry(DType d) {
  for (const auto& e : kDTypes)
    if (e.dtype == d) return e;
  OMNI_INTERNAL_ASSERT(false, "dtype table incomplete");
}

std::uint64_t read_le64(const std::byte* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<std::uint8_t>(p[i]);
  return v;
}

// Multiplies with overflow detection.
bool mul_overflows(std::uint64_t a, std::uint64_t b, std::uint64_t* out) {
  if (a != 0 && b > std::numeric_limits<std::uint64_t>::max() / a) return true;
  *out = a * b;
  return false;
}

// Length of the valid UTF-8 sequence starting at text[i] (RFC 3629: no
// overlong forms, no surrogates, nothing above U+10FFFF), or 0 when invalid.
std::size_t utf8_sequence(std::string_view text, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char c = byte(i);
  if (c < 0x80) return 1;
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xbf;  // the range of the second byte
  if (c >= 0xc2 && c <= 0xdf)
    n = 2;
  else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
  } else
    return 0;
  if (i + n > text.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k)
    if (byte(i + k) < 0x80 || byte(i + k) > 0xbf) return 0;
  return n;
}

// FormatError naming the file and the byte when `text` is not UTF-8, with the
// text just before it (which tells whose name or value it is in).
void check_utf8(std::string_view text, const std::string& file) {
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t n = utf8_sequence(text, i);
    if (n > 0) {
      i += n;
      continue;
    }
    std::size_t from = i > 40 ? i - 40 : 0;
    while (from < i && (static_cast<unsigned char>(text[from]) & 0xc0) == 0x80) ++from;
    std::string before(text.substr(from, i - from));
    for (char& ch : before)
      if (static_cast<unsigned char>(ch) < 0x20) ch = '?';
    throw FormatError(detail::concat(file, ": header is not valid UTF-8 at byte ", 8 + i,
                                     " (after '", before, "')"));
  }
}

// Parses the header's JSON. A JSON object may repeat a key and the parser
// would keep only the last one, so repeated names are caught while parsing:
// FormatError naming the file and the tensor.
nlohmann::json parse_header_json(std::string_view text, const std::string& file) {
  check_utf8(text, file);
  std::vector<std::set<std::string>> open_objects;
  std::string tensor;  // the top-level key being parsed
  std::string duplicate;
  const auto on_event = [&](int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    if (event == Event::object_start) {
      open_objects.emplace_back();
    } else if (event == Event::object_end) {
      if (!open_objects.empty()) open_objects.pop_back();
    } else if (event == Event::key && !open_objects.empty() && duplicate.empty()) {
      const auto& key = parsed.get_ref<const std::string&>();
      if (open_objects.size() == 1) tensor = key;
      if (!open_objects.back().insert(key).second)
        duplicate =
            open_objects.size() == 1 ? detail::concat(file, ": tensor '", key, "' appears twice")
            : tensor == "__metadata__"
                ? detail::concat(file, ": __metadata__ key '", key, "' appears twice")
                : detail::concat(file, ": tensor '", tensor, "': field '", key, "' appears twice");
    }
    return true;
  };
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text.begin(), text.end(), on_event);
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(detail::concat(file, " (safetensors header): invalid JSON: ", e.what()));
  }
  OMNI_CHECK(duplicate.empty(), FormatError, duplicate);
  return json;
}

}  // namespace

DType dtype_from_string(std::string_view name, std::string_view context) {
  for (const auto& e : kDTypes)
    if (e.name == name) return e.dtype;
  throw FormatError(detail::concat(context, ": unknown dtype '", name, "'"));
}
std::string_view to_string(DType d) {
  return entry(d).name;
}
std::size_t element_size(DType d) {
  return entry(d).size;
}
torch::ScalarType to_scalar_type(DType d) {
  return entry(d).scalar;
}
DType from_scalar_type(torch::ScalarType type) {
  for (const auto& e : kDTypes)
    if (e.scalar == type) return e.dtype;
  throw FormatError(detail::concat("no safetensors dtype for torch type ", c10::toString(type)));
}

std::uint64_t TensorInfo::numel() const {
  std::uint64_t n = 1;
  for (auto d : shape) n *= static_cast<std::uint64_t>(d);
  return n;
}

const TensorInfo* SafetensorsHeader::find(std::string_view name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

SafetensorsHeader parse_safetensors_header(std::span<const std::byte> prefix,
                                           std::uint64_t file_size, const std::string& file) {
  OMNI_CHECK(prefix.size() >= 8 && file_size >= 8, FormatError, file,
             ": too small for a safetensors file (", file_size, " bytes)");
  SafetensorsHeader header;
  header.header_bytes = read_le64(prefix.data());
  OMNI_CHECK(header.header_bytes <= kMaxHeaderBytes, FormatError, file, ": header length ",
             header.header_bytes, " exceeds the limit of ", kMaxHeaderBytes, " bytes");
  OMNI_CHECK(header.header_bytes <= file_size - 8, FormatError, file, ": header length ",
             header.header_bytes, " runs past the end of the file (", file_size, " bytes)");
  OMNI_CHECK(prefix.size() >= 8 + header.header_bytes, FormatError, file,
             ": header not fully available");
  header.data_offset = 8 + header.header_bytes;
  const std::uint64_t data_bytes = file_size - header.data_offset;

  std::string_view text(reinterpret_cast<const char*>(prefix.data() + 8), header.header_bytes);
  // The format allows trailing spaces as padding.
  while (!text.empty() && (text.back() == ' ' || text.back() == '\0')) text.remove_suffix(1);
  nlohmann::json json = parse_header_json(text, file);
  OMNI_CHECK(json.is_object(), FormatError, file, ": header is not a JSON object");

  // Names are unique: parse_header_json rejects a repeated one.
  for (auto it = json.begin(); it != json.end(); ++it) {
    const std::string& name = it.key();
    const auto& value = it.value();
    if (name == "__metadata__") {
      OMNI_CHECK(value.is_object(), FormatError, file, ": __metadata__ is not an object");
      for (auto m = value.begin(); m != value.end(); ++m) {
        OMNI_CHECK(m.value().is_string(), FormatError, file, ": __metadata__ value for '", m.key(),
                   "' is not a string");
        header.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = file + ": tensor '" + name + "'";
    OMNI_CHECK(value.is_object(), FormatError, where, ": entry is not an object");
    OMNI_CHECK(value.contains("dtype") && value["dtype"].is_string(), FormatError, where,
               ": missing dtype");
    OMNI_CHECK(value.contains("shape") && value["shape"].is_array(), FormatError, where,
               ": missing shape");
    OMNI_CHECK(value.contains("data_offsets") && value["data_offsets"].is_array() &&
                   value["data_offsets"].size() == 2,
               FormatError, where, ": data_offsets must be [begin, end]");
    for (auto k = value.begin(); k != value.end(); ++k)
      OMNI_CHECK(k.key() == "dtype" || k.key() == "shape" || k.key() == "data_offsets", FormatError,
                 where, ": unknown field '", k.key(), "'");
    TensorInfo info;
    info.name = name;
    info.dtype = dtype_from_string(value["dtype"].get<std::string>(), where);
    // `extent` multiplies max(dim, 1): a shape with a zero holds no bytes, but
    // LibTorch still computes its strides (and crashes when they overflow).
    constexpr auto kMaxExtent =
        static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
    std::uint64_t numel = 1;
    std::uint64_t extent = element_size(info.dtype);
    for (const auto& d : value["shape"]) {
      OMNI_CHECK(d.is_number_unsigned() || (d.is_number_integer() && d.get<std::int64_t>() >= 0),
                 FormatError, where, ": shape entries must be non-negative integers");
      const auto dim = d.get<std::uint64_t>();
      OMNI_CHECK(dim <= kMaxExtent && !mul_overflows(numel, dim, &numel) &&
                     !mul_overflows(extent, std::max<std::uint64_t>(dim, 1), &extent) &&
                     extent <= kMaxExtent,
                 FormatError, where, ": shape overflows (its strides exceed 2^63 bytes)");
      info.shape.push_back(static_cast<std::int64_t>(dim));
    }
    for (const auto& o : value["data_offsets"])
      OMNI_CHECK(o.is_number_unsigned() || (o.is_number_integer() && o.get<std::int64_t>() >= 0),
                 FormatError, where, ": data_offsets must be non-negative integers");
    info.begin = value["data_offsets"][0].get<std::uint64_t>();
    info.end = value["data_offsets"][1].get<std::uint64_t>();
    OMNI_CHECK(info.begin <= info.end, FormatError, where, ": data_offsets [", info.begin, ", ",
               info.end, "] are reversed");
    OMNI_CHECK(info.end <= data_bytes, FormatError, where, ": data_offsets [", info.begin, ", ",
               info.end, "] run past the data section (", data_bytes, " bytes)");
    std::uint64_t expected = 0;
    OMNI_CHECK(!mul_overflows(numel, element_size(info.dtype), &expected), FormatError, where,
               ": byte size overflows");
    OMNI_CHECK(info.nbytes() == expected, FormatError, where, ": holds ", info.nbytes(),
               " bytes but ", to_string(info.dtype), " × shape needs ", expected);
    header.tensors.push_back(std::move(info));
  }
  std::sort(header.tensors.begin(), header.tensors.end(),
            [](const TensorInfo& a, const TensorInfo& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  for (std::size_t i = 1; i < header.tensors.size(); ++i) {
    const auto& prev = header.tensors[i - 1];
    const auto& cur = header.tensors[i];
    OMNI_CHECK(cur.begin >= prev.end, FormatError, file, ": tensor '", cur.name,
               "' overlaps tensor '", prev.name, "'");
  }
  return header;
}

SafetensorsHeader read_safetensors_header(const std::filesystem::path& path) {
  const std::string label = path.string();
  std::ifstream in(path, std::ios::binary);
  OMNI_CHECK(in.good(), FormatError, label, ": cannot open file");
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  OMNI_CHECK(!ec, FormatError, label, ": cannot stat file");
  std::vector<std::byte> prefix(8);
  in.read(reinterpret_cast<char*>(prefix.data()), std::min<std::uint64_t>(8, size));
  OMNI_CHECK(size >= 8, FormatError, label, ": too small for a safetensors file (", size,
             " bytes)");
  const auto n = read_le64(prefix.data());
  OMNI_CHECK(n <= kMaxHeaderBytes && n <= size - 8, FormatError, label, ": header length ", n,
             n > kMaxHeaderBytes ? " exceeds the limit" : " runs past the end of the file (",
             n > kMaxHeaderBytes ? "" : std::to_string(size) + " bytes)");
  prefix.resize(8 + n);
  in.read(reinterpret_cast<char*>(prefix.data() + 8), static_cast<std::streamsize>(n));
  OMNI_CHECK(in.good(), FormatError, label, ": cannot read header");
  return parse_safetensors_header(prefix, size, label);
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::filesystem::path& path) {
  const std::string label = path.string();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  OMNI_CHECK(fd >= 0, FormatError, label, ": cannot open file: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    throw FormatError(label + ": cannot stat file");
  }
  const auto size = static_cast<std::size_t>(st.st_size);
  void* map = nullptr;
  if (size > 0) {
    // Copy-on-write: pages stay the page cache's until written; a write (a
    // weight changed in place after offload is disabled, Note [Weights that
    // alias the file]) gets a private page instead of a SIGSEGV (L5 of the
    // GPU review), and never reaches the file.
    map = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
      ::close(fd);
      throw FormatError(label + ": cannot map file: " + std::strerror(errno));
    }
  }
  ::close(fd);
  std::shared_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->map_ = static_cast<const std::byte*>(map);
  file->map_bytes_ = size;
  file->header_ =
      parse_safetensors_header(std::span<const std::byte>(file->map_, size), size, label);
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(const_cast<std::byte*>(map_), map_bytes_);
}

std::span<const std::byte> SafetensorsFile::bytes(const TensorInfo& info) const {
  OMNI_INTERNAL_ASSERT(header_.data_offset + info.end <= map_bytes_);
  return {map_ + header_.data_offset + info.begin, info.nbytes()};
}

torch::Tensor SafetensorsFile::view(const TensorInfo& info) const {
  const auto data = bytes(info);
  const auto options = torch::TensorOptions().dtype(to_scalar_type(info.dtype));
  if (info.nbytes() == 0) return torch::empty(info.shape, options);
  void* ptr = const_cast<std::byte*>(data.data());
  if (reinterpret_cast<std::uintptr_t>(ptr) % element_size(info.dtype) != 0) {
    auto out = torch::empty(info.shape, options);
    std::memcpy(out.data_ptr(), ptr, info.nbytes());
    return out;
  }
  auto keep_alive = shared_from_this();
  return torch::from_blob(
      ptr, info.shape, [keep_alive](void*) {}, options);
}

torch::Tensor SafetensorsFile::view(std::string_view name) const {
  const auto* info = find(name);
  OMNI_CHECK(info != nullptr, FormatError, path_.string(), ": no tensor named '", name, "'");
  return view(*info);
}

void save_safetensors(const std::filesystem::path& path,
                      const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<torch::Tensor> data;
  std::uint64_t offset = 0;
  std::set<std::string> names;
  for (const auto& [name, tensor] : tensors) {
    OMNI_CHECK(names.insert(name).second, FormatError, path.string(), ": tensor '", name,
               "' given twice");
    auto t = tensor.detach().to(torch::kCPU).contiguous();
    const auto bytes = static_cast<std::uint64_t>(t.numel()) * t.element_size();
    header[name] = {{"dtype", std::string(to_string(from_scalar_type(t.scalar_type())))},
                    {"shape", t.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    data.push_back(std::move(t));
  }
  std::string text = header.dump();
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');
  const auto tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    OMNI_CHECK(out.good(), FormatError, tmp, ": cannot create file");
    std::uint64_t n = text.size();
    char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((n >> (8 * i)) & 0xff);
    out.write(len, 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const auto& t : data)
      out.write(static_cast<const char*>(t.data_ptr()),
                static_cast<std::streamsize>(t.numel() * t.element_size()));
    OMNI_CHECK(out.good(), FormatError, tmp, ": write failed");
  }
  std::filesystem::rename(tmp, path);
}

std::vector<std::pair<std::string, torch::Tensor>> load_safetensors(
    const std::filesystem::path& path) {
  auto file = SafetensorsFile::open(path);
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& info : file->tensors()) out.emplace_back(info.name, file->view(info).clone());
  return out;
}

}  // namespace omni::io
