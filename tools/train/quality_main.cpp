// omni-quality MODEL [--per-split N] [--steps N] [--guidance G] [--sheet PNG]
// [--max-sequence-length N] [--reconstruct | --from-sigma S [--prompt-shape NAME]]:
// generates the fixed evaluation prompts (quality.h: seen and held-out
// combinations, fixed seeds) with the ordinary loader and prints what each
// clip shows and the rates per split. Exit status: 0 measured; 1 failed.
#include <torch/torch.h>
#include <CLI/CLI.hpp>

#include <fstream>
#include <iostream>

#include "evaluation.h"
#include "omni/io/image_writer.h"
#include "omni/pipelines/wan_pipeline.h"
#include "trainer.h"

int main(int argc, char** argv) {
  omni::train::ensure_passive_openmp(argv);
  CLI::App app{"Measures colours, shape and motion in what a tiny-shapes model generates"};
  std::string model;
  int per_split = 24;
  int threads = 2;
  std::optional<int> steps;
  std::optional<double> guidance;
  std::string sheet;
  int sheet_rows = 12;
  bool reconstruct = false;
  std::optional<double> from_sigma;
  std::string prompt_shape;
  std::optional<std::int64_t> sequence_length;
  app.add_option("model", model, "model directory (diffusers layout)")->required();
  app.add_option("--per-split", per_split, "prompts seen in training and held out, each")
      ->default_val(per_split);
  app.add_option("--steps", steps, "denoising steps (default: the pipeline's)");
  app.add_option("--guidance", guidance, "guidance scale for both experts (default: pipeline's)");
  app.add_option("--threads", threads)->default_val(threads);
  app.add_option("--sheet", sheet, "write a PNG of the first cases' frames (every other frame)");
  app.add_option("--sheet-rows", sheet_rows)->default_val(sheet_rows);
  app.add_flag("--reconstruct", reconstruct,
               "measure the VAE alone: drawn clips encoded and decoded (no prompts)");
  auto* from_sigma_option =
      app.add_option("--from-sigma", from_sigma,
                     "denoise drawn clips noised to this level (0, 1] instead of generating "
                     "(Note [Denoising a drawn clip])");
  std::vector<std::string> shape_names;
  for (const auto shape : omni::train::kShapes)
    shape_names.emplace_back(omni::train::name_of(shape));
  app.add_option("--prompt-shape", prompt_shape,
                 "with --from-sigma: the prompt names this shape instead of the drawn one")
      ->check(CLI::IsMember(shape_names))
      ->needs(from_sigma_option);
  app.add_option("--max-sequence-length", sequence_length,
                 "tokens each prompt is padded to (default: the pipeline's, 512)")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    omni::train::configure_cpu(threads);
    auto pipe = omni::pipelines::load_pipeline(model);
    if (sequence_length) {
      auto* wan = dynamic_cast<omni::pipelines::WanPipeline*>(pipe.get());
      if (wan == nullptr) throw std::invalid_argument("--max-sequence-length needs a WanPipeline");
      wan->set_max_sequence_length(*sequence_length);
    }
    omni::train::EvalOptions options;
    options.steps = steps;
    options.guidance_scale = guidance;
    for (const auto shape : omni::train::kShapes)
      if (omni::train::name_of(shape) == prompt_shape) options.prompt_shape = shape;
    // Interleave seen and held-out cases so a short sheet shows both.
    const auto cases = omni::train::evaluation_cases(per_split);
    std::vector<omni::train::EvalCase> ordered;
    const std::size_t half = cases.size() / 2;
    for (std::size_t i = 0; i < half; ++i) {
      ordered.push_back(cases[i]);
      if (half + i < cases.size()) ordered.push_back(cases[half + i]);
    }
    for (std::size_t i = 2 * half; i < cases.size(); ++i) ordered.push_back(cases[i]);
    const auto result =
        reconstruct  ? omni::train::evaluate_reconstruction(*pipe, ordered)
        : from_sigma ? omni::train::evaluate_from_noised(*pipe, ordered, options, *from_sigma)
                     : omni::train::evaluate_model(*pipe, ordered, options);
    std::cout << omni::train::format_report(result);
    if (!sheet.empty()) {
      const auto png = omni::io::encode_png(omni::train::case_sheet(result.cases, sheet_rows));
      std::ofstream(sheet, std::ios::binary) << png;
      std::cout << "sheet: " << sheet << "\n";
    }
  } catch (const std::exception& e) {
    std::cerr << "omni-quality: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
