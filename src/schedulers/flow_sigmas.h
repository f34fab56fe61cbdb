// The float64 schedule arithmetic both flow-matching schedulers share, written
// to round exactly as the reference's numpy code does (Note [Scheduler parity
// with diffusers] in omni/schedulers/scheduler.h).
#pragma once

#include <vector>

namespace omni::schedulers::internal {

// numpy.linspace(start, stop, num) in float64: start + i·step with
// step = (stop − start)/(num − 1), the last entry exactly `stop`.
std::vector<double> linspace(double start, double stop, int num);

// The flow shift σ' = shift·σ / (1 + (shift − 1)·σ), in place, in numpy's
// order of operations.
void apply_flow_shift(std::vector<double>& sigmas, double shift);

// Stretches the schedule so that its last entry becomes `terminal`:
// 1 − (1 − σ)/scale with scale = (1 − σ_last)/(1 − terminal).
void stretch_to_terminal(std::vector<double>& sigmas, double terminal);

}  // namespace omni::schedulers::internal
