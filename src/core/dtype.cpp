// Element types and the bit-exact 16-bit float conversions.
#include "attnkit/dtype.hpp"

#include <bit>
#include <cstdint>

#include "core/bf16_rounding.hpp"

namespace attnkit {

std::size_t dtype_size(DType dtype) noexcept {
  switch (dtype) {
    case DType::f64: case DType::i64: return 8;
    case DType::f32: case DType::i32: return 4;
    case DType::f16: case DType::bf16: return 2;
    case DType::boolean: case DType::int8: case DType::int4: case DType::fp8_e4m3: case DType::fp8_e5m2: return 1;
  }
  return 0;
}

std::string_view dtype_name(DType dtype) noexcept {
  switch (dtype) {
    case DType::f64: return "f64";
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::boolean: return "bool";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::int8: return "int8";
    case DType::int4: return "int4";
    case DType::fp8_e4m3: return "fp8_e4m3";
    case DType::fp8_e5m2: return "fp8_e5m2";
  }
  return "unknown";
}

bool is_floating(DType dtype) noexcept {
  return dtype == DType::f64 || dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16;
}

float to_float(bfloat16 x) noexcept { return std::bit_cast<float>(std::uint32_t{x.bits} << 16); }

bfloat16 to_bfloat16(float x) noexcept { return {detail::bf16_bits_nearest_even(std::bit_cast<std::uint32_t>(x))}; }

float to_float(float16 x) noexcept {
  const std::uint32_t sign = std::uint32_t{x.bits & 0x8000u} << 16;
  const std::uint32_t exponent = (x.bits >> 10) & 0x1Fu;
  const std::uint32_t mantissa = x.bits & 0x3FFu;
  if (exponent == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));  // inf, NaN
  if (exponent == 0) {
    // Zero or subnormal: mantissa · 2^-24, exact in float.
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));  // rebias 15 -> 127
}

float16 to_float16(float x) noexcept {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  const std::uint16_t sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t abs_bits = bits & 0x7FFFFFFFu;
  if (abs_bits > 0x7F800000u) return {static_cast<std::uint16_t>(sign | 0x7E00u)};  // NaN (quiet)
  if (abs_bits >= 0x477FF000u) return {static_cast<std::uint16_t>(sign | 0x7C00u)};  // rounds to >= 65520: inf
  if (abs_bits < 0x38800000u) {
    // Below the smallest normal half (2^-14): the result is a subnormal multiple of 2^-24. Adding
    // 0.5 (2^-1) aligns the float's mantissa so that the hardware's own round-to-nearest-even of the
    // addition performs the half rounding; the low bits of the sum are the half mantissa.
    const float shifted = std::bit_cast<float>(abs_bits) + 0.5f;
    return {static_cast<std::uint16_t>(sign | (std::bit_cast<std::uint32_t>(shifted) - 0x3F000000u))};
  }
  // Normal: rebias the exponent and round the 23-bit mantissa to 10 bits, ties to even. A carry out of
  // the mantissa correctly bumps the exponent.
  const std::uint32_t rebiased = abs_bits - ((127u - 15u) << 23);
  const std::uint32_t rounding = 0xFFFu + ((rebiased >> 13) & 1u);
  return {static_cast<std::uint16_t>(sign | ((rebiased + rounding) >> 13))};
}

}  // namespace attnkit
