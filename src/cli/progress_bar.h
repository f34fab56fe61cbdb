// Progress bars drawn only on a terminal: denoising (steps/s and ETA) and
// loading weights into their host homes (bytes and GB/s).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include <unistd.h>

namespace omni::cli {

// "#########....................." for `fraction` (0..1) of 30 cells.
inline std::string bar_of(double fraction) {
  constexpr int width = 30;
  std::string bar(static_cast<std::size_t>(width * std::clamp(fraction, 0.0, 1.0)), '#');
  bar.resize(width, '.');
  return bar;
}

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
    const auto bar = bar_of(total > 0 ? static_cast<double>(step) / total : 1.0);
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

// OffloadOptions::home_progress: the bytes read from the checkpoint into
// the homes so far, at most ten redraws a second, and GB/s since the start.
class LoadBar {
 public:
  explicit LoadBar(std::FILE* out = stderr) : out_(out), enabled_(::isatty(::fileno(out))) {}

  void update(std::uint64_t done, std::uint64_t total) {
    if (!enabled_ || total == 0) return;
    const auto now = std::chrono::steady_clock::now();
    if (done < total && now - drawn_ < std::chrono::milliseconds(100)) return;
    drawn_ = now;
    const double seconds = std::chrono::duration<double>(now - start_).count();
    const auto bar = bar_of(static_cast<double>(done) / total);
    std::fprintf(out_, "\r  loading weights [%s] %.2f/%.2f GB  %.2f GB/s ", bar.c_str(), done / 1e9,
                 total / 1e9, seconds > 0 ? done / 1e9 / seconds : 0.0);
    if (done == total) std::fprintf(out_, "\n");
    std::fflush(out_);
  }

 private:
  std::FILE* out_;
  bool enabled_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point drawn_{};
};

}  // namespace omni::cli
