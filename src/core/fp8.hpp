// The two OCP 8-bit floating formats of a KV cache's fp8 storage (attnkit/quantized.hpp):
//   e4m3  sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinities, NaN at S.1111.111 only,
//         largest finite 448 ("E4M3FN");
//   e5m2  sign, 5 exponent bits (bias 15), 2 mantissa bits: IEEE-like, the top byte of a float16,
//         with ±inf and NaN; largest finite 57344.
// Each code's value in double (exact), and the nearest code to a value. Plain code: a cache row is
// quantised once; the kernels widen codes in registers (cpu/simd/*.hpp) and are tested against
// fp8_value over all 256 codes.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "attnkit/dtype.hpp"

namespace attnkit::detail {

struct Fp8Format {
  int exponent_bits, mantissa_bits, bias;
  double largest;  // the largest finite value
  bool has_infinity;
};

constexpr Fp8Format fp8_format(DType dtype) {
  return dtype == DType::fp8_e4m3 ? Fp8Format{4, 3, 7, 448.0, false} : Fp8Format{5, 2, 15, 57344.0, true};
}

// The value of `code`, exactly.
inline double fp8_value(DType dtype, std::uint8_t code) {
  const Fp8Format f = fp8_format(dtype);
  const int mantissa = code & ((1 << f.mantissa_bits) - 1);
  const int exponent = (code >> f.mantissa_bits) & ((1 << f.exponent_bits) - 1);
  const int top = (1 << f.exponent_bits) - 1;
  double magnitude;
  if (f.has_infinity && exponent == top) {
    magnitude = mantissa == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else if (!f.has_infinity && exponent == top && mantissa == (1 << f.mantissa_bits) - 1) {
    magnitude = std::numeric_limits<double>::quiet_NaN();
  } else if (exponent == 0) {  // zero or subnormal
    magnitude = std::ldexp(mantissa, 1 - f.bias - f.mantissa_bits);
  } else {
    magnitude = std::ldexp(mantissa + (1 << f.mantissa_bits), exponent - f.bias - f.mantissa_bits);
  }
  return (code & 0x80) ? -magnitude : magnitude;
}

// The code nearest to x, ties to the even code (the even mantissa), for finite x; beyond the
// largest finite value, the largest (the quantiser scales blocks so that none is).
inline std::uint8_t fp8_nearest(DType dtype, double x) {
  const Fp8Format f = fp8_format(dtype);
  const int sign = std::signbit(x) ? 0x80 : 0;
  const double a = std::min(std::fabs(x), f.largest);
  if (a == 0) return static_cast<std::uint8_t>(sign);
  // The spacing of a's binade (the subnormals share the smallest normal binade's), then a rounded
  // to a multiple of it: nearbyint rounds ties to even, which is the even mantissa.
  int binade;
  std::frexp(a, &binade);  // a = m · 2^binade, m in [0.5, 1)
  const int e = std::max(binade - 1, 1 - f.bias);
  const double multiple = std::nearbyint(std::ldexp(a, f.mantissa_bits - e));  // exact scaling
  // multiple is at most 2^(mantissa_bits + 1): one past the binade is the next binade's first code.
  const int subnormal = e == 1 - f.bias && multiple < (1 << f.mantissa_bits);
  const int mantissa = static_cast<int>(multiple) & ((1 << f.mantissa_bits) - 1);
  const int exponent = subnormal ? 0 : e + f.bias + (multiple >= (2 << f.mantissa_bits) ? 1 : 0);
  return static_cast<std::uint8_t>(sign | (exponent << f.mantissa_bits) | mantissa);
}

}  // namespace attnkit::detail
