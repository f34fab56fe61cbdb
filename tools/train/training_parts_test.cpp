// The training pieces that shape what the models learn from: the VAE's
// colour jitter (it must keep the held-out combinations unseen), the latent
// grid of the shape mask, the weighted flow-matching loss and the
// tokenizer's pieces.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <unistd.h>
#include <cmath>
#include <filesystem>
#include <random>
#include <set>
#include <sstream>

#include "model_files.h"
#include "omni/io/tokenizer.h"
#include "shapes.h"
#include "trainer.h"
#include "training_parts.h"

namespace omni::train {
namespace {

TEST(Shapes, DrawClipUsesColourOverrides) {
  ShapeClip clip;
  clip.spec = {Colour::kRed, Shape::kSquare, Motion::kStill, Colour::kBlack};
  clip.foreground_rgb = std::array<int, 3>{10, 200, 90};
  clip.background_rgb = std::array<int, 3>{250, 0, 128};
  const auto video = draw_clip(clip);
  const auto frames = to_uint8_frames(video);  // [F, H, W, 3]
  const auto centre = frames[0][32][32];
  EXPECT_EQ(centre[0].item<int>(), 10);
  EXPECT_EQ(centre[1].item<int>(), 200);
  EXPECT_EQ(centre[2].item<int>(), 90);
  const auto corner = frames[0][0][0];
  EXPECT_EQ(corner[0].item<int>(), 250);
  EXPECT_EQ(corner[1].item<int>(), 0);
  EXPECT_EQ(corner[2].item<int>(), 128);
}

TEST(Shapes, NearestColourOfThePalette) {
  for (auto colour : {Colour::kRed, Colour::kGreen, Colour::kBlue, Colour::kYellow, Colour::kWhite,
                      Colour::kBlack, Colour::kGray})
    EXPECT_EQ(nearest_colour(rgb_of(colour)), colour) << name_of(colour);
  EXPECT_EQ(nearest_colour({200, 60, 40}), Colour::kRed);
  EXPECT_EQ(nearest_colour({100, 110, 130}), Colour::kGray);
}

// Note [Word pieces]: spm_train's word model on the training prompts gives
// every word of the grammar one piece, held-out prompts included (they use
// the same words); its unigram model splits the words into near-letters.
TEST(Tokenizer, WordModelGivesEveryWordOnePiece) {
  if (!io::Tokenizer::available()) GTEST_SKIP() << "built without the SentencePiece module";
  std::vector<std::string> corpus;
  for (const auto& spec : all_specs())
    if (!is_held_out(spec)) corpus.push_back(prompt_of(spec));
  const auto base =
      std::filesystem::temp_directory_path() / ("omni_word_pieces_" + std::to_string(::getpid()));
  const auto word = io::Tokenizer::from_file(train_tokenizer(base / "word", corpus, 64, "word"));
  const auto unigram =
      io::Tokenizer::from_file(train_tokenizer(base / "unigram", corpus, 64, "unigram"));
  std::filesystem::remove_all(base);
  constexpr std::int64_t kUnk = 2;
  for (const auto& spec : all_specs()) {
    const auto prompt = prompt_of(spec);
    std::istringstream in(prompt);
    std::size_t words = 0;
    for (std::string w; in >> w;) ++words;
    const auto ids = word.encode(prompt);
    EXPECT_EQ(ids.size(), words) << prompt;
    EXPECT_EQ(std::count(ids.begin(), ids.end(), kUnk), 0) << prompt;
    EXPECT_GT(unigram.encode(prompt).size(), 2 * words) << prompt;
  }
}

TEST(TrainingParts, JitteredColoursNeverNameAHeldOutCombination) {
  std::mt19937_64 rng(7);
  int red_fg = 0, gray_bg = 0;
  for (int i = 0; i < 3000; ++i) {
    auto clip = sample_clip(rng, Split::kTrain);
    parts::jitter_colours(rng, clip);
    ASSERT_TRUE(clip.foreground_rgb && clip.background_rgb);
    auto named = clip.spec;
    named.foreground = nearest_colour(*clip.foreground_rgb);
    named.background = nearest_colour(*clip.background_rgb);
    EXPECT_FALSE(is_held_out(named)) << prompt_of(named);
    int d2 = 0;
    for (int c = 0; c < 3; ++c) {
      const int d = (*clip.foreground_rgb)[c] - (*clip.background_rgb)[c];
      d2 += d * d;
    }
    EXPECT_GE(d2, 80 * 80);
    red_fg += named.foreground == Colour::kRed;
    gray_bg += named.background == Colour::kGray;
  }
  // Red foregrounds and gray backgrounds each still occur, only not together.
  EXPECT_GT(red_fg, 50);
  EXPECT_GT(gray_bg, 50);
}

TEST(TrainingParts, LatentCellsGroupFramesAsTheWanVae) {
  // 9 frames of 16×16 → 3 latent frames of 4×4 cells.
  auto mask = torch::zeros({1, 1, 9, 16, 16});
  mask[0][0][0][1][9] = 1;   // frame 0 → latent frame 0, cell (0, 2)
  mask[0][0][4][15][0] = 1;  // frames 1–4 → latent frame 1, cell (3, 0)
  mask[0][0][5][6][6] = 1;   // frames 5–8 → latent frame 2, cell (1, 1)
  const auto cells = parts::latent_cells(mask, 4, 4);
  ASSERT_EQ(cells.sizes(), (std::vector<std::int64_t>{1, 1, 3, 4, 4}));
  EXPECT_EQ(cells.sum().item<float>(), 3.0f);
  EXPECT_EQ(cells[0][0][0][0][2].item<float>(), 1.0f);
  EXPECT_EQ(cells[0][0][1][3][0].item<float>(), 1.0f);
  EXPECT_EQ(cells[0][0][2][1][1].item<float>(), 1.0f);
  EXPECT_THROW(parts::latent_cells(torch::zeros({1, 1, 8, 16, 16}), 4, 4), c10::Error);
}

TEST(TrainingParts, LatentCellsFollowATwoFrameVae) {
  // 9 frames at 2 frames a latent frame → 5 latent frames: 0 | 1–2 | 3–4 | 5–6 | 7–8.
  auto mask = torch::zeros({1, 1, 9, 8, 8});
  mask[0][0][2][0][0] = 1;  // → latent frame 1
  mask[0][0][3][7][7] = 1;  // → latent frame 2
  mask[0][0][8][0][7] = 1;  // → latent frame 4
  const auto cells = parts::latent_cells(mask, 4, 2);
  ASSERT_EQ(cells.sizes(), (std::vector<std::int64_t>{1, 1, 5, 2, 2}));
  EXPECT_EQ(cells.sum().item<float>(), 3.0f);
  EXPECT_EQ(cells[0][0][1][0][0].item<float>(), 1.0f);
  EXPECT_EQ(cells[0][0][2][1][1].item<float>(), 1.0f);
  EXPECT_EQ(cells[0][0][4][0][1].item<float>(), 1.0f);
  EXPECT_THROW(parts::latent_cells(torch::zeros({1, 1, 10, 8, 8}), 4, 2), c10::Error);
}

// The VAE config the trainer writes is one the library reads back with the
// compression the sizes ask for (scale_factor_temporal is checked against the
// flags when it is read).
TEST(TrainingParts, VaeConfigDeclaresItsTimeCompression) {
  for (std::int64_t spatial : {4, 8})
    for (std::int64_t temporal : {2, 4}) {
      ModelSizes sizes;
      sizes.vae_spatial = spatial;
      sizes.vae_temporal = temporal;
      const auto config = models::wan::AutoencoderKLWanConfig::from_json(
          component_configs(sizes).vae, "vae config");
      EXPECT_EQ(config.temporal_compression(), temporal) << spatial << "x" << temporal;
      EXPECT_EQ(config.spatial_compression(), spatial) << spatial << "x" << temporal;
    }
}

// vae_frames must fit the time compression: 1 + 2k frames for a 2-frame VAE,
// 1 + 4k for Wan's; other compressions are refused by name.
TEST(TrainingParts, OptionsCheckFramesAgainstTheTimeCompression) {
  TrainOptions o;
  o.vae_frames = 7;
  o.sizes.vae_temporal = 2;
  EXPECT_NO_THROW(o.validate());
  o.sizes.vae_temporal = 4;
  EXPECT_THROW(o.validate(), std::invalid_argument);
  o.vae_frames = 9;
  EXPECT_NO_THROW(o.validate());
  o.sizes.vae_temporal = 3;
  try {
    o.validate();
    ADD_FAILURE() << "vae_temporal 3 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("vae_temporal"), std::string::npos) << e.what();
  }
}

TEST(TrainingParts, WeightedMseIsTheMseForEqualWeightsAndFollowsTheWeights) {
  torch::manual_seed(3);
  const auto prediction = torch::randn({2, 3, 3, 4, 4});
  const auto target = torch::randn({2, 3, 3, 4, 4});
  const auto equal = torch::full({2, 1, 3, 4, 4}, 5.0);
  EXPECT_NEAR(parts::weighted_mse(prediction, target, equal).item<double>(),
              torch::mse_loss(prediction, target).item<double>(), 1e-6);
  // All the weight on one cell: the loss is that cell's error over the channels.
  auto one = torch::zeros({2, 1, 3, 4, 4});
  one[1][0][2][3][1] = 1;
  const auto cell_error = (prediction.select(0, 1).select(1, 2).select(1, 3).select(1, 1) -
                           target.select(0, 1).select(1, 2).select(1, 3).select(1, 1))
                              .pow(2)
                              .mean();
  EXPECT_NEAR(parts::weighted_mse(prediction, target, one).item<double>(),
              cell_error.item<double>(), 1e-6);
}

TEST(TrainingParts, OutlineMarksWhereAnotherShapeWouldDiffer) {
  ShapeClip clip;
  clip.spec = {Colour::kRed, Shape::kCircle, Motion::kStill, Colour::kBlack};
  clip.start_x = clip.start_y = 32;
  clip.radius = 10;
  const auto outline = parts::outline_pixels(clip);
  ASSERT_EQ(outline.sizes(), (std::vector<std::int64_t>{1, 9, 64, 64}));
  // Inside the square's corner, outside the circle: marked, in every frame.
  EXPECT_EQ(outline[0][0][39][39].item<float>(), 1.0f);
  EXPECT_EQ(outline[0][8][39][39].item<float>(), 1.0f);
  // Inside every shape, and far outside all of them: not marked.
  EXPECT_EQ(outline[0][0][33][32].item<float>(), 0.0f);
  EXPECT_EQ(outline[0][0][2][2].item<float>(), 0.0f);
  // Geometry only: the clip's colours do not move the outline.
  auto recoloured = clip;
  recoloured.foreground_rgb = std::array<int, 3>{10, 200, 90};
  recoloured.background_rgb = std::array<int, 3>{250, 0, 128};
  EXPECT_TRUE(torch::equal(parts::outline_pixels(recoloured), outline));
  // The shape's own pixels: the circle covers its centre and not the corner.
  const auto own = parts::shape_pixels(clip);
  EXPECT_EQ(own[0][0][32][32].item<float>(), 1.0f);
  EXPECT_EQ(own[0][0][39][39].item<float>(), 0.0f);
}

TEST(TrainingParts, FlowBatchWeighsTheShapeCells) {
  parts::LatentSet data;
  data.latents = torch::randn({3, 2, 3, 4, 4});
  data.object = torch::zeros({3, 1, 3, 4, 4});
  data.object[2][0][1][2][2] = 1;
  data.outline = torch::zeros({3, 1, 3, 4, 4});
  data.outline[2][0][1][2][2] = 1;
  data.outline[2][0][1][2][3] = 1;
  const auto batch = parts::flow_matching_batch(data, {2, 0}, {0.5f, 0.25f}, 4.0, 0.0);
  ASSERT_EQ(batch.weight.sizes(), (std::vector<std::int64_t>{2, 1, 3, 4, 4}));
  EXPECT_EQ(batch.weight[0][0][1][2][2].item<float>(), 5.0f);
  EXPECT_EQ(batch.weight.sum().item<float>(), 2 * 48 + 4.0f);
  // The outline weight adds to the object weight where both mark a cell.
  const auto outlined = parts::flow_matching_batch(data, {2, 0}, {0.5f, 0.25f}, 4.0, 3.0);
  EXPECT_EQ(outlined.weight[0][0][1][2][2].item<float>(), 8.0f);
  EXPECT_EQ(outlined.weight[0][0][1][2][3].item<float>(), 4.0f);
  EXPECT_EQ(outlined.weight.sum().item<float>(), 2 * 48 + 4.0f + 6.0f);
  // x_σ = (1 − σ)·x₀ + σ·ε and v = ε − x₀ give x₀ = x_σ − σ·v.
  EXPECT_TRUE(
      torch::allclose(batch.noisy[1] - 0.25 * batch.target[1], data.latents[0], 1e-5, 1e-5));
  EXPECT_EQ(batch.timestep[0].item<float>(), 500.0f);
}

TEST(TrainingParts, OtherShapePromptNeverMakesAHeldOutCombination) {
  std::mt19937_64 rng(7);
  // Green: a triangle is held out, so a green circle can only become a square.
  const ShapeSpec green_circle{Colour::kGreen, Shape::kCircle, Motion::kLeft, Colour::kBlack};
  for (int i = 0; i < 20; ++i)
    EXPECT_EQ(parts::other_shape_prompt(prompt_of(green_circle), rng),
              "a green square moving left on a black background");
  // Yellow: both other shapes occur.
  const ShapeSpec yellow_square{Colour::kYellow, Shape::kSquare, Motion::kDown, Colour::kGray};
  std::set<std::string> seen;
  for (int i = 0; i < 50; ++i)
    seen.insert(parts::other_shape_prompt(prompt_of(yellow_square), rng));
  EXPECT_EQ(seen, (std::set<std::string>{"a yellow circle moving down on a gray background",
                                         "a yellow triangle moving down on a gray background"}));
  // Not the grammar's: nothing to contrast.
  EXPECT_EQ(parts::other_shape_prompt("", rng), "");
  EXPECT_EQ(parts::other_shape_prompt("a red circle", rng), "");
  // Every training prompt's contrast is a training prompt.
  for (const auto& spec : all_specs()) {
    if (is_held_out(spec)) continue;
    const auto other = parts::other_shape_prompt(prompt_of(spec), rng);
    if (other.empty()) continue;
    bool found = false;
    for (const auto& s : all_specs())
      if (prompt_of(s) == other) {
        found = true;
        EXPECT_FALSE(is_held_out(s)) << other;
        EXPECT_NE(s.shape, spec.shape) << other;
      }
    EXPECT_TRUE(found) << other;
  }
}

TEST(TrainingParts, ShapeContrastIsAHingeOnTheMaskedErrors) {
  const auto target = torch::zeros({2, 2, 1, 2, 2});
  auto mask = torch::zeros({2, 1, 1, 2, 2});
  mask[0][0][0][0][0] = 1;
  mask[1][0][0][1][1] = 1;
  // Clip 0: right error 1 on its cell, swapped error 4: margin met, no loss.
  // Clip 1: right error 1, swapped error 1.1 < 1.25: loss 0.15. Cells
  // outside the mask do not count.
  auto right = torch::zeros({2, 2, 1, 2, 2});
  auto swapped = torch::zeros({2, 2, 1, 2, 2});
  for (int c = 0; c < 2; ++c) {
    right[0][c][0][0][0] = 1.0;
    swapped[0][c][0][0][0] = 2.0;
    right[1][c][0][1][1] = 1.0;
    swapped[1][c][0][1][1] = std::sqrt(1.1);
  }
  right[1][0][0][0][0] = 100;  // outside clip 1's mask
  const auto loss = parts::shape_contrast(right, swapped, target, mask, 0.25);
  EXPECT_NEAR(loss.item<double>(), 0.15 / 2, 1e-6);
  // Gradients pull the right prediction towards the target and push the
  // swapped one away, on clip 1 only.
  right.requires_grad_(true);
  swapped.requires_grad_(true);
  parts::shape_contrast(right, swapped, target, mask, 0.25).backward();
  EXPECT_GT(right.grad()[1][0][0][1][1].item<double>(), 0);
  EXPECT_LT(swapped.grad()[1][0][0][1][1].item<double>(), 0);
  EXPECT_EQ(right.grad()[0].abs().sum().item<double>(), 0);
  EXPECT_EQ(right.grad()[1][0][0][0][0].item<double>(), 0);
}

}  // namespace
}  // namespace omni::train
