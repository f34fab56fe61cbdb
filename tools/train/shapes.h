// The procedural world of models/tiny-shapes: one flat shape of one colour
// moving over a flat background, its prompt grammar, and the combinations
// held out of training.
//
//   ShapeClip clip = sample_clip(rng, Split::kTrain);
//   torch::Tensor video = draw_clip(clip, kClipGeometry);  // float [3, F, H, W] in [-1, 1]
//   std::string prompt = prompt_of(clip);  // "a red circle moving right on a black background"
//
// Everything here is deterministic given the generator; nothing touches
// torch's global generator.
#pragma once

#include <torch/types.h>

#include <array>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace omni::train {

enum class Colour { kRed, kGreen, kBlue, kYellow, kWhite, kBlack, kGray };
enum class Shape { kCircle, kSquare, kTriangle };
enum class Motion { kLeft, kRight, kUp, kDown, kStill };

// Foreground colours, background colours, shapes and motions the grammar uses.
inline constexpr std::array kForegrounds = {Colour::kRed, Colour::kGreen, Colour::kBlue,
                                            Colour::kYellow, Colour::kWhite};
inline constexpr std::array kBackgrounds = {Colour::kBlack, Colour::kGray, Colour::kWhite};
inline constexpr std::array kShapes = {Shape::kCircle, Shape::kSquare, Shape::kTriangle};
inline constexpr std::array kMotions = {Motion::kLeft, Motion::kRight, Motion::kUp, Motion::kDown,
                                        Motion::kStill};

std::string_view name_of(Colour colour);
std::string_view name_of(Shape shape);
std::string_view name_of(Motion motion);
// sRGB 0..255 of a palette colour.
std::array<int, 3> rgb_of(Colour colour);

// What a prompt asks for.
struct ShapeSpec {
  Colour foreground = Colour::kRed;
  Shape shape = Shape::kCircle;
  Motion motion = Motion::kRight;
  Colour background = Colour::kBlack;
  bool operator==(const ShapeSpec&) const = default;
};

// One drawn clip: the spec plus where and how large and fast.
struct ShapeClip {
  ShapeSpec spec;
  double start_x = 32;  // centre in pixels at frame 0
  double start_y = 32;
  double radius = 10;  // half the shape's extent in pixels
  double speed = 3;    // pixels per frame (0 when still)
  // Drawn instead of the spec's palette colours when set (sRGB 0..255): the
  // VAE's colour jitter (Note [Colour jitter for the VAE] in trainer.cpp).
  std::optional<std::array<int, 3>> foreground_rgb;
  std::optional<std::array<int, 3>> background_rgb;
};

struct ClipGeometry {
  std::int64_t width = 64;
  std::int64_t height = 64;
  std::int64_t frames = 9;  // 1 + 4k for the Wan VAE
  // Pixels per frame of a moving shape, drawn uniformly in [min, max]
  // (Note [How fast the shapes move] in shapes.cpp).
  double min_speed = 2.5;
  double max_speed = 3.5;
  // Half the shape's extent in pixels, drawn uniformly in [min, max]
  // (Note [How large the shapes are] in shapes.cpp).
  double min_radius = 8.0;
  double max_radius = 11.0;
};
inline constexpr ClipGeometry kClipGeometry{};

// "a red circle moving right on a black background";
// still: "a red circle standing still on a black background".
std::string prompt_of(const ShapeSpec& spec);

// Note [Held-out combinations]
// Never drawn for training, so the quality test measures generalisation to
// combinations of known words: every green triangle, every blue square,
// every circle moving up, and every red shape on a gray background.
bool is_held_out(const ShapeSpec& spec);

// The palette colour nearest to `rgb` (squared distance in sRGB).
Colour nearest_colour(const std::array<int, 3>& rgb);

// Every valid spec (foreground ≠ background) in a fixed order.
std::vector<ShapeSpec> all_specs();

enum class Split { kTrain, kHeldOut, kAny };

// A random valid spec of the split, then a random placement that keeps the
// shape inside the frame for the whole clip.
ShapeClip sample_clip(std::mt19937_64& rng, Split split,
                      const ClipGeometry& geometry = kClipGeometry);
ShapeClip place_clip(std::mt19937_64& rng, const ShapeSpec& spec,
                     const ClipGeometry& geometry = kClipGeometry);

// Whether pixel centre (x, y) lies inside `shape` of half-extent `radius` at
// (cx, cy). Shared by the drawing and by tests.
bool inside(Shape shape, double x, double y, double cx, double cy, double radius);

// float32 [3, F, H, W] in [-1, 1] (the VAE's input range); each pixel is
// averaged over a 2×2 grid of samples, so edges are slightly soft.
torch::Tensor draw_clip(const ShapeClip& clip, const ClipGeometry& geometry = kClipGeometry);

// uint8 [F, H, W, 3], the layout the pipeline returns.
torch::Tensor to_uint8_frames(const torch::Tensor& video);

}  // namespace omni::train
