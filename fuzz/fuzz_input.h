// Helpers the fuzz targets share: the input as a file (in memory, no disk)
// and a scratch directory for inputs that must sit next to other files.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <span>
#include <stdexcept>
#include <string>

#include "omni/error.h"

namespace omni::fuzz {

// The fuzzer's bytes as an anonymous in-memory file, opened by path
// (/proc/self/fd/N) exactly as a file on disk would be. Not copyable.
class MemFile {
 public:
  explicit MemFile(std::span<const std::byte> bytes)
      : fd_(::memfd_create("omni-fuzz", MFD_CLOEXEC)) {
    if (fd_ < 0) throw std::runtime_error("memfd_create failed");
    std::size_t done = 0;
    while (done < bytes.size()) {
      const auto n = ::write(fd_, bytes.data() + done, bytes.size() - done);
      if (n <= 0) throw std::runtime_error("memfd write failed");
      done += static_cast<std::size_t>(n);
    }
  }
  ~MemFile() { ::close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;

  std::filesystem::path path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_;
};

// A directory for this process, created on first use and removed at exit
// (libFuzzer runs one input after another in one process).
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name)
      : path_(std::filesystem::temp_directory_path() /
              ("omni_fuzz_" + name + "_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline void write_file(const std::filesystem::path& path, const std::uint8_t* data,
                       std::size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out.good()) throw std::runtime_error("cannot write " + path.string());
}

// Runs `fn`, taking omni's typed answers to bad input (ConfigError,
// FormatError) as expected; anything else escapes to libFuzzer as a finding.
template <typename Fn>
void expect_typed_error(Fn&& fn) {
  try {
    fn();
  } catch (const omni::ConfigError&) {
  } catch (const omni::FormatError&) {
  }
}

}  // namespace omni::fuzz
