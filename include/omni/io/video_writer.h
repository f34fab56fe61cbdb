// Writing generated frames as video: one H.264 stream in an MP4 container,
// encoded through FFmpeg's libraries (libavformat, libavcodec, libswscale).
//
//   omni::io::write_video("out.mp4", frames, /*fps=*/16);  // frames: uint8 [F, H, W, 3]
//
// Available when omni is built with OMNI_WITH_VIDEO (the default); a minimal
// build without FFmpeg keeps the same API and reports a FormatError instead.
#pragma once

#include <torch/types.h>

#include <filesystem>
#include <string>

namespace omni::io {

// Whether this build can write video (OMNI_WITH_VIDEO).
bool video_supported();

struct VideoOptions {
  int fps = 16;  // frames per second, 1..240
  // libx264's constant rate factor (0 lossless … 51 worst); 18 is visually
  // lossless for generated content. Other H.264 encoders get a bit rate instead.
  int crf = 18;
};

// Writes frames (uint8 [F, H, W, 3], RGB, any device) to `path` as an MP4
// with one H.264 stream in yuv420p (BT.709, limited range, tagged so).
// yuv420p needs even sizes: an odd width or height is padded by repeating the
// last column or row, so the video is one pixel wider or taller than the
// frames. The encoder is libx264 when FFmpeg has it, otherwise the first other
// H.264 encoder that opens. Atomic: written to a temporary file beside `path`,
// then renamed; on failure `path` is untouched. Synchronous, caller's thread.
// FormatError with the reason on bad frames, an fps out of range, a build
// without video, no usable H.264 encoder (naming each one tried) or a failed
// write.
void write_video(const std::filesystem::path& path, const torch::Tensor& frames,
                 const VideoOptions& options = {});

// The H.264 encoder write_video would use (e.g. "libx264"), or an empty
// string when none is available or the build has no video support.
std::string video_encoder_name();

}  // namespace omni::io
