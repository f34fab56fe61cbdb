// Writing generated frames: PNG (one frame, or a contact sheet of all frames)
// and PNG frame sequences.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace omni::io {

// Note [Frame patterns]
// A path holding '%' names a PNG sequence, one file per frame: exactly one
// frame-number field, printf's %d with at most a 0 flag and a width (%d,
// %03d, %5d), in the file name (not in a folder); %% is a literal percent.
// Anything else (%s, %n, %x, %-5d, two fields, none) is a ConfigError naming
// the pattern and the offending field. The name is built here, never by
// handing the user's text to printf as a format.
class FramePattern {
 public:
  // Whether `path` names a sequence (holds a '%').
  static bool is_pattern(std::string_view path);
  // Parses `pattern`; ConfigError when it breaks the rules above.
  explicit FramePattern(std::string pattern);
  // The file of frame `index` (>= 0): "frames/%03d.png", 7 → "frames/007.png".
  std::filesystem::path file(std::int64_t index) const;
  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  std::string prefix_;  // before the field, %% already a single '%'
  std::string suffix_;  // after it, likewise
  bool zero_pad_ = false;
  int width_ = 0;
};

// frames: uint8 [F, H, W, 3] on the host.
// - "out.png" with one frame: that frame; with several: a contact sheet
//   (frames left to right, top to bottom, in a near-square grid).
// - a path containing '%' (a FramePattern, e.g. "frames/%03d.png"): one PNG per frame.
// Missing parent folders are created. ConfigError on a bad pattern; FormatError
// on an unsupported extension or a failed write. Returns the files written.
std::vector<std::filesystem::path> write_frames(const std::filesystem::path& path,
                                                const torch::Tensor& frames, int fps);

// The contact sheet write_frames uses for several frames: uint8 [H', W', 3].
torch::Tensor contact_sheet(const torch::Tensor& frames);

// Encodes one uint8 [H, W, 3] frame as PNG bytes (for the server).
std::string encode_png(const torch::Tensor& frame);
// Decodes PNG bytes into uint8 [H, W, C] (for tests and checks).
torch::Tensor decode_png(const std::string& bytes);

}  // namespace omni::io
