// The work jobs do on the engine's thread, and the encodings of its output
// (private to src/server).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "omni/omni.h"
#include "omni/server/request_parser.h"

namespace omni::server {

// Runs an image request: n generations with seeds seed, seed+1, … (mod 2^64),
// each the same engine call as `omni generate --num-frames 1`, up to
// `max_batch` of them at a time in one phase-batched run (Note [Batched
// generation]). Returns one PNG per image; the first failure is rethrown.
// Engine thread.
std::vector<std::string> generate_images(Omni& engine, const ImageRequest& request,
                                         const pipelines::ProgressFn& progress = {},
                                         std::size_t max_batch = 1);

// MP4 (H.264) bytes of uint8 [F, H, W, 3] frames, through io::write_video.
// FormatError when this build cannot write video.
std::string encode_mp4(const torch::Tensor& frames, int fps);

std::string base64_encode(std::string_view bytes);

}  // namespace omni::server
