// Note [Measuring a clip] (quality.h).
#include "quality.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

namespace omni::train {

namespace {

template <std::size_t N>
Colour nearest(const std::array<Colour, N>& palette, const std::array<double, 3>& rgb) {
  Colour best = palette[0];
  double best_d = 1e30;
  for (auto c : palette) {
    const auto p = rgb_of(c);
    double d = 0;
    for (int k = 0; k < 3; ++k) d += (rgb[k] - p[k]) * (rgb[k] - p[k]);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

struct Component {
  std::int64_t area = 0;
  double cx = 0, cy = 0;
  std::int64_t x0 = 0, x1 = 0, y0 = 0, y1 = 0;
};

// The largest 4-connected component of mask [H·W] (row-major).
Component largest_component(const std::vector<std::uint8_t>& mask, std::int64_t H, std::int64_t W) {
  std::vector<std::int32_t> label(mask.size(), -1);
  std::vector<std::int64_t> stack;
  Component best;
  for (std::int64_t start = 0; start < H * W; ++start) {
    if (!mask[start] || label[start] >= 0) continue;
    Component c;
    c.x0 = W;
    c.y0 = H;
    c.x1 = -1;
    c.y1 = -1;
    double sx = 0, sy = 0;
    stack.assign(1, start);
    label[start] = 1;
    while (!stack.empty()) {
      const auto i = stack.back();
      stack.pop_back();
      const auto y = i / W, x = i % W;
      ++c.area;
      sx += static_cast<double>(x);
      sy += static_cast<double>(y);
      c.x0 = std::min(c.x0, x);
      c.x1 = std::max(c.x1, x);
      c.y0 = std::min(c.y0, y);
      c.y1 = std::max(c.y1, y);
      const std::int64_t next[4] = {x > 0 ? i - 1 : -1, x + 1 < W ? i + 1 : -1, y > 0 ? i - W : -1,
                                    y + 1 < H ? i + W : -1};
      for (auto n : next) {
        if (n >= 0 && mask[n] && label[n] < 0) {
          label[n] = 1;
          stack.push_back(n);
        }
      }
    }
    c.cx = sx / static_cast<double>(c.area);
    c.cy = sy / static_cast<double>(c.area);
    if (c.area > best.area) best = c;
  }
  return best;
}

}  // namespace

ClipMeasurement measure_clip(const torch::Tensor& frames_in) {
  TORCH_CHECK(
      frames_in.dim() == 4 && frames_in.size(3) == 3 && frames_in.scalar_type() == torch::kUInt8,
      "measure_clip: frames must be uint8 [F, H, W, 3], got ", frames_in.sizes());
  const auto frames = frames_in.contiguous();
  const auto F = frames.size(0), H = frames.size(1), W = frames.size(2);
  const auto* px = frames.data_ptr<std::uint8_t>();
  const auto at = [&](std::int64_t f, std::int64_t y, std::int64_t x, int c) {
    return static_cast<double>(px[((f * H + y) * W + x) * 3 + c]);
  };
  ClipMeasurement m;

  std::array<std::vector<double>, 3> border;
  for (std::int64_t f = 0; f < F; ++f)
    for (std::int64_t y = 0; y < H; ++y)
      for (std::int64_t x = 0; x < W; ++x)
        if (y < 2 || y >= H - 2 || x < 2 || x >= W - 2)
          for (int c = 0; c < 3; ++c) border[c].push_back(at(f, y, x, c));
  const std::array<double, 3> bg = {median(border[0]), median(border[1]), median(border[2])};
  m.background = nearest(kBackgrounds, bg);

  // Pass 1: the object's colour, from pixels clearly off the background.
  std::array<std::vector<double>, 3> object_rgb;
  std::vector<std::uint8_t> mask(static_cast<std::size_t>(H * W));
  const auto frame_mask = [&](std::int64_t f, const auto& is_object) {
    for (std::int64_t y = 0; y < H; ++y)
      for (std::int64_t x = 0; x < W; ++x)
        mask[y * W + x] = is_object(at(f, y, x, 0), at(f, y, x, 1), at(f, y, x, 2));
    return largest_component(mask, H, W);
  };
  const auto off_background = [&](double r, double g, double b) {
    const double d =
        (r - bg[0]) * (r - bg[0]) + (g - bg[1]) * (g - bg[1]) + (b - bg[2]) * (b - bg[2]);
    return d > kMaskDistance * kMaskDistance;
  };
  std::vector<double> areas, xs, ys, ts;
  for (std::int64_t f = 0; f < F; ++f) {
    const auto obj = frame_mask(f, off_background);
    areas.push_back(static_cast<double>(obj.area));
    if (obj.area < kMinArea) continue;
    xs.push_back(obj.cx);
    ys.push_back(obj.cy);
    ts.push_back(static_cast<double>(f));
    // Object colour: mask pixels inside the component's box (the component
    // itself up to stray neighbours), sampled from every frame.
    for (std::int64_t y = obj.y0; y <= obj.y1; ++y)
      for (std::int64_t x = obj.x0; x <= obj.x1; ++x)
        if (mask[y * W + x])
          for (int c = 0; c < 3; ++c) object_rgb[c].push_back(at(f, y, x, c));
  }
  m.object_area = median(areas);
  if (2 * static_cast<std::int64_t>(ts.size()) <= F) return m;  // no object in most frames
  const std::array<double, 3> fg = {median(object_rgb[0]), median(object_rgb[1]),
                                    median(object_rgb[2])};
  m.foreground = nearest(kForegrounds, fg);

  // Pass 2: the outline is where the colour is half-way from the background
  // to the object's (blur-invariant, unlike a fixed distance).
  std::array<double, 3> axis;
  double axis_sq = 0;
  for (int c = 0; c < 3; ++c) {
    axis[c] = fg[c] - bg[c];
    axis_sq += axis[c] * axis[c];
  }
  const auto object_side = [&](double r, double g, double b) {
    const double t = (r - bg[0]) * axis[0] + (g - bg[1]) * axis[1] + (b - bg[2]) * axis[2];
    return t > 0.5 * axis_sq;
  };
  std::vector<double> fills;
  for (std::int64_t f = 0; f < F; ++f) {
    const auto obj = frame_mask(f, object_side);
    if (obj.area < kMinArea) continue;
    const double box = static_cast<double>((obj.x1 - obj.x0 + 1) * (obj.y1 - obj.y0 + 1));
    fills.push_back(static_cast<double>(obj.area) / box);
  }
  if (2 * static_cast<std::int64_t>(fills.size()) > F) {
    m.fill = median(fills);
    m.shape = m.fill >= 0.89 ? Shape::kSquare : m.fill >= 0.64 ? Shape::kCircle : Shape::kTriangle;
  }

  // Least-squares slopes of the centroid against the frame index.
  const auto slope = [&](const std::vector<double>& v) {
    const double n = static_cast<double>(ts.size());
    double st = 0, sv = 0, stt = 0, stv = 0;
    for (std::size_t i = 0; i < ts.size(); ++i) {
      st += ts[i];
      sv += v[i];
      stt += ts[i] * ts[i];
      stv += ts[i] * v[i];
    }
    const double den = n * stt - st * st;
    return den > 0 ? (n * stv - st * sv) / den : 0.0;
  };
  m.travel_x = slope(xs) * static_cast<double>(F - 1);
  m.travel_y = slope(ys) * static_cast<double>(F - 1);
  if (std::max(std::abs(m.travel_x), std::abs(m.travel_y)) < kStillPixels)
    m.motion = Motion::kStill;
  else if (std::abs(m.travel_x) >= std::abs(m.travel_y))
    m.motion = m.travel_x > 0 ? Motion::kRight : Motion::kLeft;
  else
    m.motion = m.travel_y > 0 ? Motion::kDown : Motion::kUp;
  return m;
}

ClipScore score(const ClipMeasurement& m, const ShapeSpec& wanted) {
  return {m.foreground == wanted.foreground, m.background == wanted.background,
          m.shape == wanted.shape, m.motion == wanted.motion};
}

void QualityTally::add(const ClipScore& s) {
  ++clips;
  foreground += s.foreground;
  background += s.background;
  shape += s.shape;
  motion += s.motion;
}

std::vector<EvalCase> evaluation_cases(int per_split) {
  std::vector<ShapeSpec> seen, held;
  for (const auto& spec : all_specs()) (is_held_out(spec) ? held : seen).push_back(spec);
  std::vector<EvalCase> cases;
  const auto pick = [&](const std::vector<ShapeSpec>& from, bool held_out) {
    const auto n = std::min<std::size_t>(static_cast<std::size_t>(per_split), from.size());
    // A stride coprime with the pool, so the picks spread over every attribute.
    std::size_t stride = from.size() / std::max<std::size_t>(n, 1) + 1;
    while (std::gcd(stride, from.size()) != 1) ++stride;
    for (std::size_t i = 0; i < n; ++i) {
      const auto& spec = from[(i * stride) % from.size()];
      cases.push_back({spec, held_out, 1000 + cases.size()});
    }
  };
  pick(seen, false);
  pick(held, true);
  return cases;
}

std::string describe(const ClipMeasurement& m) {
  std::ostringstream out;
  const auto opt = [](const auto& v) { return v ? std::string(name_of(*v)) : std::string("none"); };
  out << "fg " << opt(m.foreground) << ", bg " << opt(m.background) << ", shape " << opt(m.shape)
      << " (fill " << std::round(m.fill * 100) / 100 << "), motion " << opt(m.motion) << " (dx "
      << std::round(m.travel_x) << ", dy " << std::round(m.travel_y) << ")";
  return out.str();
}

}  // namespace omni::train
