// The portable "vector" of one float: the fast kernels' algorithm on any CPU, and the baseline the
// SIMD targets are tested against.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "attnkit/dtype.hpp"
#include "core/bf16_rounding.hpp"
#include "cpu/geometry.hpp"

namespace attnkit::cpu {

struct ScalarIsa {
  using Vec = float;
  static constexpr int kLanes = 1;
  static constexpr const char* kName = "scalar";
  static constexpr Geometry kGeometry = kScalarGeometry;  // geometry.hpp
  static constexpr bool kDotBf16 = false;  // bf16 products through f32 FMA
  static constexpr bool kTiles = false;     // no matrix tiles (amx.hpp)
  static constexpr bool kTilesF16 = false;  // no f16 products on tiles (amx.hpp)

  static Vec zero() { return 0.0f; }
  static Vec set1(float x) { return x; }
  static Vec load(const float* p) { return *p; }
  // One element widened from bf16 or IEEE half storage (raw bits, unaligned).
  static Vec load_bf16(const void* p) {
    std::uint16_t bits;
    std::memcpy(&bits, p, sizeof bits);
    const std::uint32_t wide = std::uint32_t{bits} << 16;
    float out;
    std::memcpy(&out, &wide, sizeof out);
    return out;
  }
  static Vec load_f16(const void* p) {
    float16 h;
    std::memcpy(&h.bits, p, sizeof h.bits);
    return to_float(h);
  }
  // One code of a quantized KV cache row (attnkit/quantized.hpp) as a float, and one float16 scale.
  static Vec load_i8(const void* p) { return static_cast<float>(*static_cast<const std::int8_t*>(p)); }
  static Vec load_u4_low(const void* p) { return static_cast<float>(*static_cast<const std::uint8_t*>(p) & 0xF); }
  static Vec load_u4_high(const void* p) { return static_cast<float>(*static_cast<const std::uint8_t*>(p) >> 4); }
  // One code of an fp8 row (attnkit/quantized.hpp) as a float: an E5M2 code exactly (it is a
  // float16's top byte); an E4M3 code divided by 2^8: its sign, exponent and mantissa moved into a
  // float16's fields, whose exponent bias (15) is 8 more than E4M3's, and its NaN (S.1111.111) given
  // float16's all-ones exponent. The scale the kernels multiply by carries the 2^8.
  static Vec load_e5m2(const void* p) {
    return f16_to_float(static_cast<std::uint16_t>(*static_cast<const std::uint8_t*>(p) << 8));
  }
  static Vec load_e4m3_over_256(const void* p) {
    const unsigned code = *static_cast<const std::uint8_t*>(p), magnitude = code & 0x7Fu;
    const unsigned nan = magnitude == 0x7Fu ? 0x7C00u : 0u;
    return f16_to_float(static_cast<std::uint16_t>((magnitude << 7) | ((code & 0x80u) << 8) | nan));
  }
  static float f16_to_float(std::uint16_t bits) { return to_float(float16{bits}); }
  static void f16x4_to_float(const void* p, float* out) {
    for (int i = 0; i < 4; ++i) {
      std::uint16_t bits;
      std::memcpy(&bits, static_cast<const unsigned char*>(p) + 2 * i, sizeof bits);
      out[i] = f16_to_float(bits);
    }
  }
  static void store(float* p, Vec v) { *p = v; }
  // kLanes floats rounded to bf16, to nearest even, NaN made quiet (core/bf16_rounding.hpp's
  // bf16_bits_nearest_even, lane by lane; nothing flushed): the output rows of bf16 calls.
  static void store_bf16(std::uint16_t* p, Vec v) { *p = detail::bf16_bits_nearest_even(std::bit_cast<std::uint32_t>(v)); }
  static Vec add(Vec a, Vec b) { return a + b; }
  static Vec sub(Vec a, Vec b) { return a - b; }
  static Vec mul(Vec a, Vec b) { return a * b; }
  // a·b + c, rounded twice: the CPUs this target is for have no FMA instruction, and std::fma would
  // be a library call (a software one there) on every product.
  static Vec fma(Vec a, Vec b, Vec c) { return a * b + c; }
  // max(a, b) and min(a, b) return b when either is NaN, like x86's maxps/minps.
  static Vec max(Vec a, Vec b) { return a > b ? a : b; }
  static Vec min(Vec a, Vec b) { return a < b ? a : b; }
  static Vec div(Vec a, Vec b) { return a / b; }
  static float reduce_max(Vec v) { return v; }
  static float reduce_add(Vec v) { return v; }
  // Lane-wise selects on a comparison of a with b.
  static Vec select_less(Vec a, Vec b, Vec then_value, Vec else_value) { return a < b ? then_value : else_value; }
  static Vec select_equal(Vec a, Vec b, Vec then_value, Vec else_value) { return a == b ? then_value : else_value; }
  // Lane index j0 + lane as float, for masks that depend on the key position.
  static Vec iota(float start) { return start; }
  static Vec round_nearest(Vec v) { return std::nearbyint(v); }
  // 2^n for integral-valued v in [-126, 127]: built from the exponent bits.
  static Vec pow2_int(Vec v) {
    const std::uint32_t bits = static_cast<std::uint32_t>(static_cast<std::int32_t>(v) + 127) << 23;
    float out;
    std::memcpy(&out, &bits, sizeof out);
    return out;
  }
  // The float whose exponent field is v's low 8 bits (the rest zero): v's bits shifted left by 23.
  static Vec low_bits_to_exponent(Vec v) {
    std::uint32_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    bits <<= 23;
    float out;
    std::memcpy(&out, &bits, sizeof out);
    return out;
  }
  // out[k·out_stride + t] = rows[t][c + k] for t, k < kLanes: a kLanes × kLanes transpose.
  static void transpose_into(const float* const* rows, std::int64_t c, float* out, std::int64_t) { out[0] = rows[0][c]; }
  // flags | (v is NaN), lane-wise; any_set tells whether any lane of flags is set.
  static Vec or_nan(Vec flags, Vec v) { return flags != 0 || std::isnan(v) ? 1.0f : 0.0f; }
  static bool any_set(Vec flags) { return flags != 0; }
};

}  // namespace attnkit::cpu
