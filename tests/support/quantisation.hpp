// How far a value stored in an int8 or int4 row (attnkit/quantized.hpp) may lie from the float it
// quantised: the one bound the format tests and the module's cache tests both check.
#pragma once

#include <algorithm>
#include <cmath>

#include "attnkit/attnkit.hpp"

namespace attnkit::testing {

// For one block of kQuantBlock values x: half the block's step (int8: max |x| / 127, int4:
// (max − min) / 15), plus the float16 rounding of its scale (2^-11 of the step, and slack) and of
// int4's offset, the block's minimum (2^-11 of it).
inline double quantisation_bound(DType dtype, const double* x) {
  double low = x[0], high = x[0];
  for (std::int64_t i = 1; i < kQuantBlock; ++i) low = std::min(low, x[i]), high = std::max(high, x[i]);
  const double step = dtype == DType::int8 ? std::max(-low, high) / 127 : (high - low) / 15;
  return step / 2 + step * 2e-3 + (dtype == DType::int4 ? std::fabs(low) * 1e-3 : 0.0);
}

}  // namespace attnkit::testing
