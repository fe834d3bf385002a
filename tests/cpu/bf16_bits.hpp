// Small helpers of the tests of bf16 products (test_bf16_dot.cpp, test_amx_model.cpp).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "cpu/simd/bf16_dot_model.hpp"

namespace attnkit::testing {

// Two bf16 values (each exactly representable) as one 32-bit pair: lo in the low half.
inline std::uint32_t pair(float lo, float hi) {
  return std::uint32_t{cpu::float_to_bf16_bits(lo)} | std::uint32_t{cpu::float_to_bf16_bits(hi)} << 16;
}

inline bool same_bits_or_both_nan(float x, float y) {
  if (std::isnan(x) || std::isnan(y)) return std::isnan(x) && std::isnan(y);
  return std::memcmp(&x, &y, sizeof x) == 0;
}

}  // namespace attnkit::testing
