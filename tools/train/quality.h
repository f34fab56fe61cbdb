// Measuring generated clips of the shapes world (shapes.h): which colours,
// shape and motion the frames show, scored against what the prompt asked.
//
//   ClipMeasurement m = measure_clip(frames);          // uint8 [F, H, W, 3]
//   ClipScore s = score(m, spec);                      // per-attribute right/wrong
//
// The classifiers are deliberately simple and documented, so a reader can
// check them: Note [Measuring a clip].
#pragma once

#include <torch/types.h>

#include <optional>
#include <string>
#include <vector>

#include "shapes.h"

namespace omni::train {

// Note [Measuring a clip]
// background: the per-channel median of the 2-pixel border of every frame,
//   named by the nearest background palette colour (RGB distance).
// mask: pixels farther than kMaskDistance from that measured background;
//   per frame, its largest 4-connected component is the object.
// foreground: the per-channel median of the object pixels of all frames,
//   named by the nearest foreground palette colour.
// shape: per frame, the outline is where the colour is at least half-way
//   from the background to that foreground colour (so a blurred edge stays
//   where it was, whatever the contrast; a fixed distance from the
//   background draws a low-contrast object thinner and a high-contrast one
//   fatter); the largest component's area over its bounding-box area (square
//   1, circle π/4 ≈ 0.79, triangle 1/2), median over frames: ≥ 0.89 square,
//   ≥ 0.64 circle, else triangle.
// motion: the least-squares slope of the object's centroid over the frames,
//   times (F − 1): under kStillPixels of travel is still, else the dominant
//   axis and its sign (image y grows downwards).
// A clip whose object is missing or too small (under kMinArea pixels in
// most frames) has no foreground, shape or motion: all count as wrong.
inline constexpr double kMaskDistance = 60.0;
inline constexpr double kStillPixels = 6.0;
inline constexpr std::int64_t kMinArea = 12;

struct ClipMeasurement {
  std::optional<Colour> foreground;
  std::optional<Colour> background;
  std::optional<Shape> shape;
  std::optional<Motion> motion;
  double fill = 0;      // median area / bounding-box area
  double travel_x = 0;  // pixels over the clip
  double travel_y = 0;
  double object_area = 0;  // median pixels
};

// frames: uint8 [F, H, W, 3] (the pipeline's output layout).
ClipMeasurement measure_clip(const torch::Tensor& frames);

struct ClipScore {
  bool foreground = false;
  bool background = false;
  bool shape = false;
  bool motion = false;
};
ClipScore score(const ClipMeasurement& measured, const ShapeSpec& wanted);

// Correct counts over a set of clips.
struct QualityTally {
  int clips = 0;
  int foreground = 0;
  int background = 0;
  int shape = 0;
  int motion = 0;
  void add(const ClipScore& s);
  double rate(int correct) const { return clips ? static_cast<double>(correct) / clips : 0.0; }
};

// The fixed evaluation prompts: `per_split` specs seen in training and
// `per_split` held-out specs (Note [Held-out combinations]), spread evenly
// over all_specs()'s order, each with its own fixed seed.
struct EvalCase {
  ShapeSpec spec;
  bool held_out = false;
  std::uint64_t seed = 0;
};
std::vector<EvalCase> evaluation_cases(int per_split);

// "name: measured (wanted)" for a report line.
std::string describe(const ClipMeasurement& m);

}  // namespace omni::train
