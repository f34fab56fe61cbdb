#include "schedulers/flow_sigmas.h"

#include "omni/error.h"

namespace omni::schedulers::internal {

std::vector<double> linspace(double start, double stop, int num) {
  OMNI_INTERNAL_ASSERT(num >= 1);
  std::vector<double> out(static_cast<std::size_t>(num), start);
  if (num == 1) return out;
  const double step = (stop - start) / static_cast<double>(num - 1);
  for (int i = 0; i < num; ++i) out[i] = static_cast<double>(i) * step + start;
  out.back() = stop;
  return out;
}

void apply_flow_shift(std::vector<double>& sigmas, double shift) {
  for (double& s : sigmas) s = shift * s / (1.0 + (shift - 1.0) * s);
}

void stretch_to_terminal(std::vector<double>& sigmas, double terminal) {
  OMNI_INTERNAL_ASSERT(!sigmas.empty());
  const double scale = (1.0 - sigmas.back()) / (1.0 - terminal);
  for (double& s : sigmas) s = 1.0 - (1.0 - s) / scale;
}

}  // namespace omni::schedulers::internal
