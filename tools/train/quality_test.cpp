// The measuring code of the quality bar, on clips drawn by the same code
// that makes the training data (so the classifiers cannot be no-ops), and on
// degraded copies (blur, noise) closer to what a model draws.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <random>

#include "quality.h"
#include "shapes.h"

namespace omni::train {
namespace {

TEST(Shapes, PromptGrammar) {
  EXPECT_EQ(prompt_of({Colour::kRed, Shape::kCircle, Motion::kRight, Colour::kBlack}),
            "a red circle moving right on a black background");
  EXPECT_EQ(prompt_of({Colour::kWhite, Shape::kTriangle, Motion::kStill, Colour::kGray}),
            "a white triangle standing still on a gray background");
}

TEST(Shapes, HeldOutCombinationsAreNeverSampledForTraining) {
  std::mt19937_64 rng(1);
  for (int i = 0; i < 2000; ++i) EXPECT_FALSE(is_held_out(sample_clip(rng, Split::kTrain).spec));
  int held = 0;
  for (const auto& spec : all_specs()) held += is_held_out(spec);
  EXPECT_GT(held, 20);
  EXPECT_LT(held, static_cast<int>(all_specs().size()) / 2);
}

TEST(Shapes, ClipStaysInsideAndHasVideoRange) {
  std::mt19937_64 rng(2);
  for (int i = 0; i < 50; ++i) {
    const auto clip = sample_clip(rng, Split::kAny);
    const auto video = draw_clip(clip);
    EXPECT_EQ(video.sizes(), (std::vector<std::int64_t>{3, 9, 64, 64}));
    EXPECT_LE(video.max().item<float>(), 1.0f);
    EXPECT_GE(video.min().item<float>(), -1.0f);
    // The border is pure background in every frame: nothing leaves the frame.
    const auto bg = rgb_of(clip.spec.background);
    const auto frames = to_uint8_frames(video);
    for (std::int64_t f = 0; f < 9; ++f)
      for (int c = 0; c < 3; ++c) {
        EXPECT_EQ(frames[f][0][0][c].item<int>(), bg[c]);
        EXPECT_EQ(frames[f][63][63][c].item<int>(), bg[c]);
      }
  }
}

// A geometry's radii and speeds are the ones drawn, and at the largest size
// the path still fits (Note [How large the shapes are]): every frame keeps
// the shape's whole extent inside.
TEST(Shapes, PlacementFollowsTheGeometry) {
  ClipGeometry large;
  large.min_radius = 12.0;
  large.max_radius = 15.0;
  std::mt19937_64 rng(5);
  for (int i = 0; i < 200; ++i) {
    const auto clip = sample_clip(rng, Split::kAny, large);
    EXPECT_GE(clip.radius, 12.0);
    EXPECT_LE(clip.radius, 15.0);
    if (clip.spec.motion == Motion::kStill) {
      EXPECT_EQ(clip.speed, 0.0);
      continue;
    }
    EXPECT_GE(clip.speed, large.min_speed);
    EXPECT_LE(clip.speed, large.max_speed);
    const double travel = clip.speed * static_cast<double>(large.frames - 1);
    const double end_x = clip.start_x + (clip.spec.motion == Motion::kRight  ? travel
                                         : clip.spec.motion == Motion::kLeft ? -travel
                                                                             : 0.0);
    const double end_y = clip.start_y + (clip.spec.motion == Motion::kDown ? travel
                                         : clip.spec.motion == Motion::kUp ? -travel
                                                                           : 0.0);
    for (const double c : {clip.start_x, end_x, clip.start_y, end_y}) {
      EXPECT_GE(c - clip.radius, 0.0) << prompt_of(clip.spec);
      EXPECT_LE(c + clip.radius, 64.0) << prompt_of(clip.spec);
    }
  }
}

// Every spec, drawn at a random placement: the measurement must name it.
TEST(Quality, RecognisesEveryDrawnSpec) {
  std::mt19937_64 rng(3);
  QualityTally tally;
  for (const auto& spec : all_specs()) {
    const auto clip = place_clip(rng, spec);
    const auto m = measure_clip(to_uint8_frames(draw_clip(clip)));
    const auto s = score(m, spec);
    tally.add(s);
    EXPECT_TRUE(s.foreground && s.background && s.shape && s.motion)
        << prompt_of(spec) << ": " << describe(m);
  }
  EXPECT_EQ(tally.clips, static_cast<int>(all_specs().size()));
  EXPECT_EQ(tally.shape, tally.clips);
}

// Blurred and noisy clips (what a small VAE decodes) are still read right.
TEST(Quality, RobustToBlurAndNoise) {
  std::mt19937_64 rng(4);
  torch::manual_seed(4);
  QualityTally tally;
  for (const auto& spec : all_specs()) {
    const auto clip = place_clip(rng, spec);
    auto video = draw_clip(clip);
    // 3×3 box blur per frame, then Gaussian noise of σ = 0.06 (≈ 8 of 255).
    const auto frames_first = video.permute({1, 0, 2, 3});  // [F, 3, H, W]
    auto blurred = torch::avg_pool2d(frames_first, 3, 1, 1, /*ceil_mode=*/false,
                                     /*count_include_pad=*/false);
    blurred = blurred + 0.06 * torch::randn_like(blurred);
    tally.add(
        score(measure_clip(to_uint8_frames(blurred.permute({1, 0, 2, 3}).clamp(-1, 1))), spec));
  }
  EXPECT_GE(tally.rate(tally.foreground), 0.98);
  EXPECT_GE(tally.rate(tally.background), 0.98);
  EXPECT_GE(tally.rate(tally.shape), 0.9);
  EXPECT_GE(tally.rate(tally.motion), 0.98);
}

// A wider blur (a 3×3 box twice: corners and the triangle's apex rounded by
// two pixels) on every background: the half-way outline tells circles and
// squares apart every time and most triangles (measured: 96.2% of all specs
// right; a fixed distance from the background, which reads high-contrast
// objects fat, got 94.8%).
TEST(Quality, ShapeSurvivesWideBlur) {
  std::mt19937_64 rng(6);
  QualityTally tally;
  for (const auto& spec : all_specs()) {
    const auto video = draw_clip(place_clip(rng, spec)).permute({1, 0, 2, 3});  // [F, 3, H, W]
    auto blurred = video;
    for (int pass = 0; pass < 2; ++pass)
      blurred = torch::avg_pool2d(blurred, 3, 1, 1, /*ceil_mode=*/false,
                                  /*count_include_pad=*/false);
    const auto m = measure_clip(to_uint8_frames(blurred.permute({1, 0, 2, 3})));
    tally.add(score(m, spec));
    EXPECT_TRUE(score(m, spec).shape || spec.shape == Shape::kTriangle)
        << prompt_of(spec) << ": " << describe(m);
  }
  EXPECT_GE(tally.rate(tally.shape), 0.95);
  EXPECT_GE(tally.rate(tally.motion), 0.98);
}

// What a model that ignores the prompt would score: each attribute wrong
// for most specs. A measurement that always answers the same scores badly.
TEST(Quality, WrongClipsScoreWrong) {
  std::mt19937_64 rng(5);
  const auto specs = all_specs();
  const ShapeSpec fixed{Colour::kRed, Shape::kCircle, Motion::kRight, Colour::kBlack};
  const auto m = measure_clip(to_uint8_frames(draw_clip(place_clip(rng, fixed))));
  QualityTally tally;
  for (const auto& spec : specs) tally.add(score(m, spec));
  EXPECT_LT(tally.rate(tally.foreground), 0.3);
  EXPECT_LT(tally.rate(tally.background), 0.4);
  EXPECT_LT(tally.rate(tally.shape), 0.4);
  EXPECT_LT(tally.rate(tally.motion), 0.3);
}

TEST(Quality, EmptyOrNoiseClipHasNoObject) {
  auto flat = torch::full({9, 64, 64, 3}, 10, torch::kUInt8);
  const auto m = measure_clip(flat);
  EXPECT_EQ(m.background, Colour::kBlack);
  EXPECT_FALSE(m.foreground.has_value());
  EXPECT_FALSE(m.shape.has_value());
  EXPECT_FALSE(m.motion.has_value());
  EXPECT_FALSE(score(m, {Colour::kRed, Shape::kCircle, Motion::kStill, Colour::kBlack}).motion);
}

TEST(Quality, EvaluationCasesCoverBothSplitsAndEveryAttribute) {
  const auto cases = evaluation_cases(24);
  ASSERT_EQ(cases.size(), 48u);
  int held = 0;
  std::set<int> fg, bg, shape, motion;
  for (const auto& c : cases) {
    EXPECT_EQ(c.held_out, is_held_out(c.spec));
    held += c.held_out;
    fg.insert(static_cast<int>(c.spec.foreground));
    bg.insert(static_cast<int>(c.spec.background));
    shape.insert(static_cast<int>(c.spec.shape));
    motion.insert(static_cast<int>(c.spec.motion));
  }
  EXPECT_EQ(held, 24);
  EXPECT_EQ(fg.size(), kForegrounds.size());
  EXPECT_EQ(bg.size(), kBackgrounds.size());
  EXPECT_EQ(shape.size(), kShapes.size());
  EXPECT_EQ(motion.size(), kMotions.size());
}

}  // namespace
}  // namespace omni::train
