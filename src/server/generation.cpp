#include "generation.h"

#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "omni/error.h"
#include "omni/io/image_writer.h"
#include "omni/io/video_writer.h"

namespace fs = std::filesystem;

namespace omni::server {

std::vector<std::string> generate_images(Omni& engine, const ImageRequest& request,
                                         const pipelines::ProgressFn& progress,
                                         std::size_t max_batch) {
  const auto n = static_cast<std::size_t>(request.n);
  std::vector<std::string> pngs;
  pngs.reserve(n);
  for (std::size_t first = 0; first < n; first += std::max<std::size_t>(max_batch, 1)) {
    std::vector<pipelines::GenerationRequest> requests;
    for (std::size_t i = first; i < n && requests.size() < std::max<std::size_t>(max_batch, 1);
         ++i) {
      requests.push_back(request.request);
      requests.back().seed = request.request.seed + static_cast<std::uint64_t>(i);
    }
    const std::vector<pipelines::ProgressFn> callbacks(requests.size(), progress);
    for (auto& outcome : engine.generate_batch(requests, callbacks)) {
      if (outcome.error) std::rethrow_exception(outcome.error);
      pngs.push_back(io::encode_png(outcome.result.frames[0]));
    }
  }
  return pngs;
}

namespace {
// A private directory that is removed, with its contents, when it goes.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "omni-serve-XXXXXX").string();
    OMNI_CHECK(::mkdtemp(pattern.data()) != nullptr, FormatError,
               "cannot create a temporary directory in ", fs::temp_directory_path().string());
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};
}  // namespace

std::string encode_mp4(const torch::Tensor& frames, int fps) {
  // io::write_video writes files only; a private temporary file keeps the
  // encoder the same one `omni generate -o out.mp4` uses.
  TempDir dir;
  const auto file = dir.path() / "video.mp4";
  io::VideoOptions options;
  options.fps = fps;
  io::write_video(file, frames, options);
  std::ifstream in(file, std::ios::binary);
  OMNI_CHECK(in.good(), FormatError, file.string(), ": cannot read the encoded video");
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string base64_encode(std::string_view bytes) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const auto n = (static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i])) << 16) |
                   (static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8) |
                   static_cast<unsigned char>(bytes[i + 2]);
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += kAlphabet[(n >> 6) & 63];
    out += kAlphabet[n & 63];
  }
  const std::size_t rest = bytes.size() - i;
  if (rest > 0) {
    std::uint32_t n = static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i])) << 16;
    if (rest == 2) n |= static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8;
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += rest == 2 ? kAlphabet[(n >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

}  // namespace omni::server
