// How far a value stored in a quantized row (attnkit/quantized.hpp) may lie from the float it
// quantised: the one bound the format tests and the module's cache tests both check.
#pragma once

#include <algorithm>
#include <cmath>

#include "attnkit/attnkit.hpp"

namespace attnkit::testing {

// For value i of one block of kQuantBlock values x: half the block's step (int8: max |x| / 127,
// int4: (max − min) / 15), plus the float16 rounding of its scale (2^-11 of the step, and slack) and
// of int4's offset, the block's minimum (2^-11 of it). fp8: half the format's spacing at x[i] / s,
// times s, the block's power-of-two scale (the smallest at least 2^-24 that brings max |x| within
// the format's largest value).
inline double quantisation_bound(DType dtype, const double* x, std::int64_t i) {
  double low = x[0], high = x[0];
  for (std::int64_t j = 1; j < kQuantBlock; ++j) low = std::min(low, x[j]), high = std::max(high, x[j]);
  if (dtype == DType::fp8_e4m3 || dtype == DType::fp8_e5m2) {
    const bool e4m3 = dtype == DType::fp8_e4m3;
    const double largest = e4m3 ? 448.0 : 57344.0;
    const int mantissa_bits = e4m3 ? 3 : 2, min_exponent = e4m3 ? -6 : -14;
    double scale = std::ldexp(1.0, -24);
    while (std::max(-low, high) > largest * scale) scale *= 2;
    const double a = std::fabs(x[i]) / scale;
    const int exponent = a > 0 ? std::max(static_cast<int>(std::floor(std::log2(a))), min_exponent) : min_exponent;
    return std::ldexp(scale, exponent - mantissa_bits - 1) * (1 + 1e-9);
  }
  const double step = dtype == DType::int8 ? std::max(-low, high) / 127 : (high - low) / 15;
  return step / 2 + step * 2e-3 + (dtype == DType::int4 ? std::fabs(low) * 1e-3 : 0.0);
}

}  // namespace attnkit::testing
