// The procedural shapes world (shapes.h).
#include "shapes.h"

#include <algorithm>
#include <cmath>

namespace omni::train {

std::string_view name_of(Colour colour) {
  switch (colour) {
    case Colour::kRed:
      return "red";
    case Colour::kGreen:
      return "green";
    case Colour::kBlue:
      return "blue";
    case Colour::kYellow:
      return "yellow";
    case Colour::kWhite:
      return "white";
    case Colour::kBlack:
      return "black";
    case Colour::kGray:
      return "gray";
  }
  return "?";
}

std::string_view name_of(Shape shape) {
  switch (shape) {
    case Shape::kCircle:
      return "circle";
    case Shape::kSquare:
      return "square";
    case Shape::kTriangle:
      return "triangle";
  }
  return "?";
}

std::string_view name_of(Motion motion) {
  switch (motion) {
    case Motion::kLeft:
      return "left";
    case Motion::kRight:
      return "right";
    case Motion::kUp:
      return "up";
    case Motion::kDown:
      return "down";
    case Motion::kStill:
      return "still";
  }
  return "?";
}

std::array<int, 3> rgb_of(Colour colour) {
  switch (colour) {
    case Colour::kRed:
      return {220, 30, 30};
    case Colour::kGreen:
      return {30, 190, 50};
    case Colour::kBlue:
      return {40, 70, 230};
    case Colour::kYellow:
      return {235, 215, 30};
    case Colour::kWhite:
      return {240, 240, 240};
    case Colour::kBlack:
      return {10, 10, 10};
    case Colour::kGray:
      return {120, 120, 120};
  }
  return {0, 0, 0};
}

Colour nearest_colour(const std::array<int, 3>& rgb) {
  Colour best = Colour::kBlack;
  int best_d2 = -1;
  for (auto colour : {Colour::kRed, Colour::kGreen, Colour::kBlue, Colour::kYellow, Colour::kWhite,
                      Colour::kBlack, Colour::kGray}) {
    const auto p = rgb_of(colour);
    int d2 = 0;
    for (int c = 0; c < 3; ++c) d2 += (p[c] - rgb[c]) * (p[c] - rgb[c]);
    if (best_d2 < 0 || d2 < best_d2) {
      best = colour;
      best_d2 = d2;
    }
  }
  return best;
}

std::string prompt_of(const ShapeSpec& spec) {
  std::string out = "a ";
  out += name_of(spec.foreground);
  out += ' ';
  out += name_of(spec.shape);
  out += spec.motion == Motion::kStill ? " standing still" : " moving ";
  if (spec.motion != Motion::kStill) out += name_of(spec.motion);
  out += " on a ";
  out += name_of(spec.background);
  out += " background";
  return out;
}

bool is_held_out(const ShapeSpec& spec) {
  return (spec.foreground == Colour::kGreen && spec.shape == Shape::kTriangle) ||
         (spec.foreground == Colour::kBlue && spec.shape == Shape::kSquare) ||
         (spec.shape == Shape::kCircle && spec.motion == Motion::kUp) ||
         (spec.foreground == Colour::kRed && spec.background == Colour::kGray);
}

std::vector<ShapeSpec> all_specs() {
  std::vector<ShapeSpec> specs;
  for (auto fg : kForegrounds)
    for (auto shape : kShapes)
      for (auto motion : kMotions)
        for (auto bg : kBackgrounds)
          if (fg != bg) specs.push_back({fg, shape, motion, bg});
  return specs;
}

namespace {

double uniform(std::mt19937_64& rng, double lo, double hi) {
  return std::uniform_real_distribution<double>(lo, hi)(rng);
}

}  // namespace

// Note [How fast the shapes move]
// A moving shape covers 2.5–3.5 pixels a frame (ClipGeometry's speeds): 20–28
// pixels over the 9 frames. The VAE's latent frame holds 4 video frames
// (`temperal_downsample` [true, true]), so it encodes a shape that moves
// 10–14 pixels, more than half its size, within one latent frame, and gives
// moving squares and triangles back with rounded corners (every
// --reconstruct shape miss is a moving shape). Tried 2026-12-04: at 1.5–2
// pixels a frame (12–16 over the clip) the same VAE recipe reconstructs
// shape 83.3% seen / 62.5% held-out (z_dim 8; 66.7 / 45.8 at today's speed)
// and 91.7 / 66.7 (z_dim 16; 83.3 / 54.2), its misses then shapes on gray;
// but experts trained on the z_dim 16 one (3000 steps) drew almost nothing
// moving: generation read direction 33.3 / 8.3, shape 37.5 / 20.8, held-out
// foreground 62.5 (docs/tiny-shapes.md). So the speed stays until a slower
// world is shown to train experts that keep the direction.
//
// Note [How large the shapes are]
// A shape's half-extent is 8–11 pixels (ClipGeometry's radii): 16–22 pixels
// across, 4–5.5 latent cells, 2–3 expert tokens. Tried 2026-12-04 with
// 12–15 (24–30 pixels; the path still fits at 3.5 pixels a frame): the VAE
// recipe (z_dim 8) then reconstructs shape 83.3% seen / 79.2% held-out
// (66.7 / 45.8 at today's size; its misses all triangles, fill 0.64–0.71),
// but the experts trained on it with the default recipe (5000 steps) drew
// blobs as before and lost held-out colour and direction: generation read
// seen 100 / 100 / 41.7 / 100, held-out 62.5 / 100 / 16.7 / 62.5
// (docs/tiny-shapes.md). So the size stays; the experts, not the VAE, are
// what keeps the shape below the bar at that size.
//
// Note [Frames per latent frame]
// `omni-train --vae-temporal 2` builds the VAE with `temperal_downsample`
// [false, true] (ModelSizes::vae_temporal): a latent frame holds 2 video
// frames, so a moving shape smears 5–7 pixels within one instead of 10–14,
// and 9 frames give 5 latent frames (320 expert tokens, not 192). Tried
// 2026-12-05 at today's size and speed: the VAE (1498 s) reconstructs shape
// 87.5% seen / 70.8% held-out (66.7 / 45.8 with 4 frames), the best VAE yet
// at this size; but experts trained on it (3000 steps, 1.2 s a step, 3646 s
// with encoding) barely learnt the motion: generation read seen 100 / 100 /
// 37.5 / 54.2, held-out 100 / 100 / 45.8 / 37.5 (direction 25.0 / 16.7 at
// 2000 steps), and from drawn clips (`--from-sigma 0.4`) shape 58.3 / 45.8.
// With the slower shapes above the same happened: when a shape moves less
// than one expert token (8 pixels at patch 2) per latent frame, these
// experts do not learn the direction in the steps this machine allows. So
// Wan's 4 frames a latent frame stay the default (docs/tiny-shapes.md).
ShapeClip place_clip(std::mt19937_64& rng, const ShapeSpec& spec, const ClipGeometry& geometry) {
  ShapeClip clip;
  clip.spec = spec;
  clip.radius = uniform(rng, geometry.min_radius, geometry.max_radius);
  clip.speed =
      spec.motion == Motion::kStill ? 0.0 : uniform(rng, geometry.min_speed, geometry.max_speed);
  const double travel = clip.speed * static_cast<double>(geometry.frames - 1);
  const double margin = clip.radius + 1.0;
  const auto w = static_cast<double>(geometry.width);
  const auto h = static_cast<double>(geometry.height);
  // The range of the start along each axis that keeps the whole path inside.
  double x_lo = margin, x_hi = w - margin, y_lo = margin, y_hi = h - margin;
  switch (spec.motion) {
    case Motion::kLeft:
      x_lo += travel;
      break;
    case Motion::kRight:
      x_hi -= travel;
      break;
    case Motion::kUp:
      y_lo += travel;
      break;
    case Motion::kDown:
      y_hi -= travel;
      break;
    case Motion::kStill:
      break;
  }
  clip.start_x = uniform(rng, x_lo, std::max(x_lo, x_hi));
  clip.start_y = uniform(rng, y_lo, std::max(y_lo, y_hi));
  return clip;
}

ShapeClip sample_clip(std::mt19937_64& rng, Split split, const ClipGeometry& geometry) {
  static const auto specs = all_specs();
  for (;;) {
    const auto& spec = specs[std::uniform_int_distribution<std::size_t>(0, specs.size() - 1)(rng)];
    const bool held = is_held_out(spec);
    if (split == Split::kAny || (split == Split::kHeldOut) == held)
      return place_clip(rng, spec, geometry);
  }
}

bool inside(Shape shape, double x, double y, double cx, double cy, double radius) {
  const double dx = x - cx, dy = y - cy;
  switch (shape) {
    case Shape::kCircle:
      return dx * dx + dy * dy <= radius * radius;
    case Shape::kSquare: {
      const double half = 0.85 * radius;
      return std::abs(dx) <= half && std::abs(dy) <= half;
    }
    case Shape::kTriangle: {
      // Pointing up: apex at (cx, cy − r), base from (cx ± r, cy + r).
      if (dy < -radius || dy > radius) return false;
      return std::abs(dx) <= (dy + radius) / 2.0;
    }
  }
  return false;
}

torch::Tensor draw_clip(const ShapeClip& clip, const ClipGeometry& geometry) {
  const auto F = geometry.frames, H = geometry.height, W = geometry.width;
  auto video = torch::empty({3, F, H, W}, torch::kFloat32);
  auto v = video.accessor<float, 4>();
  const auto fg = clip.foreground_rgb.value_or(rgb_of(clip.spec.foreground));
  const auto bg = clip.background_rgb.value_or(rgb_of(clip.spec.background));
  double step_x = 0, step_y = 0;
  switch (clip.spec.motion) {
    case Motion::kLeft:
      step_x = -clip.speed;
      break;
    case Motion::kRight:
      step_x = clip.speed;
      break;
    case Motion::kUp:
      step_y = -clip.speed;
      break;
    case Motion::kDown:
      step_y = clip.speed;
      break;
    case Motion::kStill:
      break;
  }
  constexpr double kOffsets[2] = {0.25, 0.75};
  for (std::int64_t f = 0; f < F; ++f) {
    const double cx = clip.start_x + step_x * static_cast<double>(f);
    const double cy = clip.start_y + step_y * static_cast<double>(f);
    for (std::int64_t y = 0; y < H; ++y) {
      for (std::int64_t x = 0; x < W; ++x) {
        int hits = 0;
        for (double oy : kOffsets)
          for (double ox : kOffsets)
            hits += inside(clip.spec.shape, static_cast<double>(x) + ox,
                           static_cast<double>(y) + oy, cx, cy, clip.radius);
        const double a = hits / 4.0;
        for (int c = 0; c < 3; ++c)
          v[c][f][y][x] = static_cast<float>((a * fg[c] + (1 - a) * bg[c]) / 127.5 - 1.0);
      }
    }
  }
  return video;
}

torch::Tensor to_uint8_frames(const torch::Tensor& video) {
  return ((video.permute({1, 2, 3, 0}) + 1.0) * 127.5)
      .round()
      .clamp(0, 255)
      .to(torch::kUInt8)
      .contiguous();
}

}  // namespace omni::train
