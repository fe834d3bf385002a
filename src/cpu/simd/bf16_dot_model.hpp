// A portable model of x86's vdpbf16ps (AVX512_BF16), one lane: the specification the emulated bf16-dot
// target's vector version (emulated16.hpp) is tested against, and that the real instruction is compared
// with bit for bit on CPUs that have it (tests/cpu/test_bf16_dot.cpp).
//
// Per Intel's description of VDPBF16PS, each lane holds a pair of bf16 values in each source, and
//   acc ← acc + a.hi · b.hi,  then  acc ← acc + a.lo · b.lo,
// each step rounded to nearest even, with denormal inputs read as zero (DAZ) and denormal results
// flushed to zero (FTZ), whatever MXCSR says. A product of two bf16 values is exact in float32 (8-bit
// significands), so each step is one fused multiply-add.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace attnkit::cpu {

// A float32 with denormals replaced by a zero of the same sign.
inline float flush_denormal(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x; }

// bf16 bits as float32, denormals read as zero.
inline float bf16_bits_to_float(std::uint16_t bits) {
  const std::uint32_t wide = std::uint32_t{bits} << 16;
  float out;
  std::memcpy(&out, &wide, sizeof out);
  return flush_denormal(out);
}

// One lane: `a` and `b` hold two bf16 values each (low half: element 2i, high half: element 2i + 1).
inline float dot_bf16_pair(float acc, std::uint32_t a, std::uint32_t b) {
  acc = flush_denormal(acc);
  acc = flush_denormal(std::fma(bf16_bits_to_float(static_cast<std::uint16_t>(a >> 16)),
                                bf16_bits_to_float(static_cast<std::uint16_t>(b >> 16)), acc));
  return flush_denormal(std::fma(bf16_bits_to_float(static_cast<std::uint16_t>(a & 0xFFFF)),
                                 bf16_bits_to_float(static_cast<std::uint16_t>(b & 0xFFFF)), acc));
}

// float32 → bf16 bits, rounded to nearest even (NaN stays a quiet NaN).
inline std::uint16_t float_to_bf16_bits(float x) {
  std::uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  if (std::isnan(x)) return static_cast<std::uint16_t>((bits >> 16) | 0x40);
  bits += 0x7FFF + ((bits >> 16) & 1);
  return static_cast<std::uint16_t>(bits >> 16);
}

}  // namespace attnkit::cpu
