// Counting a model's parameters from an untrusted config.json.
//
// Note [Counting parameters without overflow]
// parameter_count() multiplies sizes read from a config file (omni inspect
// runs it on any directory it is given), so int64 arithmetic could overflow.
// Every term of the formulas is a product of positive sizes and every partial
// sum is at most the total, so the formula is evaluated first in double: when
// that estimate exceeds 2^62 the config is rejected with a ConfigError, and
// otherwise the exact int64 evaluation cannot overflow.
#pragma once

#include <cstdint>

#include "omni/error.h"

namespace omni::models::wan::internal {

// `formula(N{})` evaluates the count in arithmetic type N (double, then int64).
template <typename Formula>
std::int64_t count_parameters(const char* model, Formula&& formula) {
  const double estimate = formula(double{});
  OMNI_CHECK(estimate <= 0x1p62, ConfigError, model, " config: the sizes imply about ", estimate,
             " parameters, more than omni can count (2^62)");
  return formula(std::int64_t{});
}

}  // namespace omni::models::wan::internal
