// Vector exp and tanh written once over an ISA wrapper (src/cpu/simd/*.hpp).
#pragma once

namespace attnkit::cpu {

// Taylor coefficients 1/k! of e^r.
inline constexpr float kExpTaylor[] = {1.0f, 1.0f, 1.0f / 2, 1.0f / 6, 1.0f / 24, 1.0f / 120, 1.0f / 720, 1.0f / 5040};
inline constexpr float kLog2e = 1.44269504088896340736f;
// ln 2 split in two (Cody and Waite): kLn2High has few enough bits that n · kLn2High is exact for
// every |n| <= 128, so x − n·ln 2 keeps the precision of x.
inline constexpr float kLn2High = 0.693359375f;
inline constexpr float kLn2Low = -2.12194440e-4f;
inline constexpr float kExpUnderflow = -87.33654f;  // e^x below the smallest normal float: result 0
inline constexpr float kExpOverflow = 88.72283f;    // e^x above the largest float: clamped

// e^x. x = n·ln 2 + r with n = round(x·log2 e) and |r| <= ln(2)/2; e^r by its degree-7 Taylor
// polynomial (truncation below 5e-9 relative), times 2^n built from exponent bits. The relative error
// stays within a few ulp for every x (measured in tests/cpu/test_fast_forward.cpp), unlike
// 2^(x·log2 e), whose rounded product loses precision in proportion to |x|. x below the smallest
// normal result gives exactly 0 (so e^−inf = 0); NaN stays NaN.
template <class Isa>
typename Isa::Vec exp(typename Isa::Vec x) {
  using Vec = typename Isa::Vec;
  // Clamp with the constant first: max/min return their second operand when either is NaN.
  const Vec clamped = Isa::min(Isa::set1(kExpOverflow), Isa::max(Isa::set1(kExpUnderflow), x));
  const Vec n = Isa::round_nearest(Isa::mul(clamped, Isa::set1(kLog2e)));
  Vec r = Isa::fma(n, Isa::set1(-kLn2High), clamped);
  r = Isa::fma(n, Isa::set1(-kLn2Low), r);
  Vec p = Isa::set1(kExpTaylor[7]);
  for (int k = 6; k >= 0; --k) p = Isa::fma(p, r, Isa::set1(kExpTaylor[k]));
  const Vec result = Isa::mul(p, Isa::pow2_int(n));
  return Isa::select_less(x, Isa::set1(kExpUnderflow), Isa::zero(), result);
}

// Coefficients of e^r on |r| <= ln(2)/2 by degree 6, fitted for the least largest relative error
// (1.9e-9 with exact coefficients; 1.2 ulp as float32 through Horner's rule), one degree below the
// Taylor polynomial exp() needs for the same accuracy.
inline constexpr float kExpFitted6[] = {1.0f,        1.0f,         0.49999991f, 0.16666420f,
                                        0.04166823f, 0.008374816f, 0.0013836840f};
// x below which exp_of_nonpositive gives 0: x·log2 e rounds to n = −127 from about −87.68 down, and
// 2^−127 built from exponent bits is the float 0.
inline constexpr float kExpZeroClamp = -88.0f;
// 1.5·2^23 + 127. For |y| < 2^22, y + kRoundToExponent lands where floats are 1 apart, so the sum is
// y rounded to the nearest integer n, and its low mantissa bits hold n + 127: 2^n's exponent field.
inline constexpr float kRoundToExponent = 12582912.0f + 127.0f;

// e^x for x <= 0 or NaN: the online softmax's p = e^(s − max). Cheaper than exp(): nothing can
// overflow, and underflow needs no select, as x clamped at −88 gives n = −127, whose 2^n built from
// exponent bits is 0, so −inf (a masked score) gives exactly 0; x between about −87.68 and the smallest
// normal result gives a subnormal. One fused multiply-add both rounds x·log2 e to n and places n + 127
// where the exponent bits are cut from (no round or float-to-int conversion). Relative error within a
// few ulp elsewhere (tests/cpu/test_fast_forward.cpp).
template <class Isa>
typename Isa::Vec exp_of_nonpositive(typename Isa::Vec x) {
  using Vec = typename Isa::Vec;
  const Vec clamped = Isa::max(Isa::set1(kExpZeroClamp), x);  // NaN stays NaN (max returns its second operand)
  const Vec rounded = Isa::fma(clamped, Isa::set1(kLog2e), Isa::set1(kRoundToExponent));
  const Vec n = Isa::sub(rounded, Isa::set1(kRoundToExponent));
  Vec r = Isa::fma(n, Isa::set1(-kLn2High), clamped);
  r = Isa::fma(n, Isa::set1(-kLn2Low), r);
  Vec p = Isa::set1(kExpFitted6[6]);
  for (int k = 5; k >= 0; --k) p = Isa::fma(p, r, Isa::set1(kExpFitted6[k]));
  return Isa::mul(p, Isa::low_bits_to_exponent(rounded));
}

// e^(a − b), subtracting first: the difference of nearby values is exact.
template <class Isa>
typename Isa::Vec exp_of_difference(typename Isa::Vec a, typename Isa::Vec b) {
  return exp<Isa>(Isa::sub(a, b));
}

// Taylor coefficients of tanh(y) = y + y·Σ_k c_k·y^(2k), k = 1..8 (from the Bernoulli numbers).
inline constexpr float kTanhTaylor[] = {-1.0f / 3,
                                        2.0f / 15,
                                        -17.0f / 315,
                                        62.0f / 2835,
                                        -1382.0f / 155925,
                                        21844.0f / 6081075,
                                        -929569.0f / 638512875,
                                        6404582.0f / 10854718875};
inline constexpr float kTanhSeriesBelow = 0.55f;

// tanh(y). For |y| >= 0.55, 1 − 2 / (e^(2y) + 1): exact limits ±1 for large |y|, but its absolute
// error of ~1e-7 is a large relative one near 0, where softcap·tanh(s/softcap) would carry it into
// every score (measured 6–14× the naive float32 error at caps of 30–50). Below 0.55, the Taylor series
// through y^17 (truncation below 6e-9 relative). NaN stays NaN (the comparison is false for it).
template <class Isa>
typename Isa::Vec tanh(typename Isa::Vec y) {
  using Vec = typename Isa::Vec;
  const Vec e2y = exp<Isa>(Isa::add(y, y));
  const Vec one = Isa::set1(1.0f);
  const Vec far = Isa::sub(one, Isa::div(Isa::set1(2.0f), Isa::add(e2y, one)));
  const Vec y2 = Isa::mul(y, y);
  Vec p = Isa::set1(kTanhTaylor[7]);
  for (int k = 6; k >= 0; --k) p = Isa::fma(p, y2, Isa::set1(kTanhTaylor[k]));
  const Vec near = Isa::fma(Isa::mul(y, y2), p, y);
  const Vec magnitude = Isa::max(y, Isa::sub(Isa::zero(), y));
  return Isa::select_less(magnitude, Isa::set1(kTanhSeriesBelow), near, far);
}

}  // namespace attnkit::cpu
