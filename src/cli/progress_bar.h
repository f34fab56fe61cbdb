// A denoising progress bar with steps/s and ETA, drawn only on a terminal.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

#include <unistd.h>

namespace omni::cli {

class ProgressBar {
 public:
  explicit ProgressBar(std::FILE* out = stderr) : out_(out), enabled_(::isatty(::fileno(out))) {}

  void update(int step, int total) {
    const auto now = std::chrono::steady_clock::now();
    if (step == 1 || start_ == std::chrono::steady_clock::time_point{}) start_ = first_step_start_;
    if (!enabled_) return;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const double rate = elapsed > 0 ? step / elapsed : 0;
    const double eta = rate > 0 ? (total - step) / rate : 0;
    constexpr int width = 30;
    const int filled = total > 0 ? width * step / total : width;
    std::string bar(filled, '#');
    bar.resize(width, '.');
    std::fprintf(out_, "\r  denoising [%s] %d/%d  %.2f steps/s  ETA %.1fs ", bar.c_str(), step,
                 total, rate, eta);
    if (step == total) std::fprintf(out_, "\n");
    std::fflush(out_);
  }

 private:
  std::FILE* out_;
  bool enabled_;
  std::chrono::steady_clock::time_point first_step_start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point start_{};
};

}  // namespace omni::cli
