// Writing generated frames: PNG (one frame, or a contact sheet of all frames)
// and PNG frame sequences.
#pragma once

#include <torch/types.h>

#include <filesystem>
#include <string>
#include <vector>

namespace omni::io {

// frames: uint8 [F, H, W, 3] on the host.
// - "out.png" with one frame: that frame; with several: a contact sheet
//   (frames left to right, top to bottom, in a near-square grid).
// - a path containing "%d" (printf style, e.g. "frames/%03d.png"): one PNG per frame.
// FormatError on an unsupported extension or a failed write. Returns the files written.
std::vector<std::filesystem::path> write_frames(const std::filesystem::path& path,
                                                const torch::Tensor& frames, int fps);

// The contact sheet write_frames uses for several frames: uint8 [H', W', 3].
torch::Tensor contact_sheet(const torch::Tensor& frames);

// Encodes one uint8 [H, W, 3] frame as PNG bytes (for the server).
std::string encode_png(const torch::Tensor& frame);
// Decodes PNG bytes into uint8 [H, W, C] (for tests and checks).
torch::Tensor decode_png(const std::string& bytes);

}  // namespace omni::io
