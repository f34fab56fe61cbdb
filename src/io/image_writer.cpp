#include "omni/io/image_writer.h"

#include <cmath>
#include <fstream>

#include "omni/error.h"
#include "omni/io/video_writer.h"

#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STB_IMAGE_WRITE_STATIC
#include <stb/stb_image_write.h>
#define STB_IMAGE_IMPLEMENTATION
#define STB_IMAGE_STATIC
#define STBI_ONLY_PNG
#include <stb/stb_image.h>

namespace fs = std::filesystem;

namespace omni::io {

namespace {
void check_frames(const torch::Tensor& frames) {
  OMNI_CHECK(frames.defined() && frames.dim() == 4 && frames.size(3) == 3 &&
                 frames.scalar_type() == torch::kUInt8,
             FormatError, "frames must be uint8 [F, H, W, 3]");
}

void append(void* context, void* data, int size) {
  static_cast<std::string*>(context)->append(static_cast<const char*>(data), size);
}
}  // namespace

bool FramePattern::is_pattern(std::string_view path) {
  return path.find('%') != std::string_view::npos;
}

FramePattern::FramePattern(std::string pattern) : pattern_(std::move(pattern)) {
  auto fail = [&](const std::string& why) {
    throw ConfigError(detail::concat(
        "frame pattern '", pattern_, "': ", why,
        "; a frame pattern takes exactly one %d, %03d or %5d in its file name (%% for a "
        "literal percent)"));
  };
  const std::size_t n = pattern_.size();
  auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
  auto is_letter = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
  std::size_t field_at = std::string::npos;
  std::string* out = &prefix_;
  for (std::size_t i = 0; i < n; ++i) {
    if (pattern_[i] != '%') {
      out->push_back(pattern_[i]);
      continue;
    }
    if (i + 1 < n && pattern_[i + 1] == '%') {
      out->push_back('%');
      ++i;
      continue;
    }
    if (i + 1 == n) fail("a '%' at the end");
    // %, 0 flags, width digits, d.
    std::size_t j = i + 1;
    bool zero = false;
    for (; j < n && pattern_[j] == '0'; ++j) zero = true;
    const std::size_t width_at = j;
    while (j < n && is_digit(pattern_[j])) ++j;
    if (j < n && pattern_[j] == 'd') {
      if (j - width_at > 3)
        fail("the width of '" + pattern_.substr(i, j + 1 - i) + "' is over 999");
      if (field_at != std::string::npos) fail("more than one frame-number field");
      field_at = i;
      zero_pad_ = zero;
      width_ = j == width_at ? 0 : std::stoi(pattern_.substr(width_at, j - width_at));
      out = &suffix_;
      i = j;
      continue;
    }
    // Name the offending conversion: up to its conversion letter, if any.
    std::size_t end = i + 1;
    while (end < n && end - i < 16 && !is_letter(pattern_[end]) && pattern_[end] != '%') ++end;
    if (end < n && is_letter(pattern_[end])) ++end;
    fail("'" + pattern_.substr(i, end - i) + "' is not a frame-number field");
  }
  if (field_at == std::string::npos) fail("no frame-number field");
  if (pattern_.find('/', field_at) != std::string::npos)
    fail("the frame-number field is in a folder name");
}

fs::path FramePattern::file(std::int64_t index) const {
  std::string number = std::to_string(index);
  if (number.size() < static_cast<std::size_t>(width_))
    number.insert(0, static_cast<std::size_t>(width_) - number.size(), zero_pad_ ? '0' : ' ');
  return fs::path(prefix_ + number + suffix_);
}

std::string encode_png(const torch::Tensor& frame) {
  auto f = frame.to(torch::kCPU).contiguous();
  OMNI_CHECK(f.dim() == 3 && f.size(2) == 3 && f.scalar_type() == torch::kUInt8, FormatError,
             "a PNG frame must be uint8 [H, W, 3]");
  std::string out;
  const int ok =
      stbi_write_png_to_func(append, &out, static_cast<int>(f.size(1)), static_cast<int>(f.size(0)),
                             3, f.data_ptr<std::uint8_t>(), static_cast<int>(f.size(1) * 3));
  OMNI_CHECK(ok != 0, FormatError, "PNG encoding failed");
  return out;
}

torch::Tensor decode_png(const std::string& bytes) {
  int w = 0, h = 0, c = 0;
  unsigned char* data = stbi_load_from_memory(reinterpret_cast<const unsigned char*>(bytes.data()),
                                              static_cast<int>(bytes.size()), &w, &h, &c, 0);
  OMNI_CHECK(data != nullptr, FormatError, "not a decodable PNG: ", stbi_failure_reason());
  auto out = torch::from_blob(data, {h, w, c}, torch::kUInt8).clone();
  stbi_image_free(data);
  return out;
}

torch::Tensor contact_sheet(const torch::Tensor& frames) {
  check_frames(frames);
  const auto n = frames.size(0), h = frames.size(1), w = frames.size(2);
  const auto cols = static_cast<std::int64_t>(std::ceil(std::sqrt(static_cast<double>(n))));
  const auto rows = (n + cols - 1) / cols;
  auto sheet = torch::zeros({rows * h, cols * w, 3}, torch::kUInt8);
  for (std::int64_t i = 0; i < n; ++i) {
    const auto r = i / cols, c = i % cols;
    sheet.slice(0, r * h, (r + 1) * h).slice(1, c * w, (c + 1) * w).copy_(frames[i]);
  }
  return sheet;
}

std::vector<fs::path> write_frames(const fs::path& path, const torch::Tensor& frames, int fps) {
  check_frames(frames);
  const std::string p = path.string();
  auto write_file = [](const fs::path& file, const std::string& bytes) {
    if (file.has_parent_path()) fs::create_directories(file.parent_path());
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    OMNI_CHECK(out.good(), FormatError, file.string(), ": cannot create file");
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    OMNI_CHECK(out.good(), FormatError, file.string(), ": write failed");
  };
  if (path.extension() == ".mp4") {
    write_video(path, frames, VideoOptions{.fps = fps});
    return {path};
  }
  if (FramePattern::is_pattern(p)) {
    const FramePattern pattern(p);
    std::vector<fs::path> written;
    for (std::int64_t i = 0; i < frames.size(0); ++i) {
      written.push_back(pattern.file(i));
      write_file(written.back(), encode_png(frames[i]));
    }
    return written;
  }
  const auto ext = path.extension().string();
  OMNI_CHECK(ext == ".png", FormatError, p, ": unsupported output format '", ext,
             "' (use .mp4 for video, .png for a frame or contact sheet, or a pattern like "
             "frames/%03d.png)");
  write_file(path, encode_png(frames.size(0) == 1 ? frames[0] : contact_sheet(frames)));
  return {path};
}

}  // namespace omni::io
