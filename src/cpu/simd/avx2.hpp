// Eight floats in a 256-bit AVX2 register; FMA3 for the multiply-adds, F16C for half floats.
// Included only by translation units compiled with -mavx2 -mfma -mf16c.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "cpu/geometry.hpp"
#include "cpu/simd/transpose_8x8.hpp"

namespace attnkit::cpu {

struct Avx2Isa {
  using Vec = __m256;
  static constexpr int kLanes = 8;
  static constexpr const char* kName = "avx2";
  static constexpr Geometry kGeometry = kAvx2Geometry;  // geometry.hpp
  static constexpr bool kDotBf16 = false;  // bf16 products through f32 FMA
  static constexpr bool kTiles = false;     // no matrix tiles (amx.hpp)
  static constexpr bool kTilesF16 = false;  // no f16 products on tiles (amx.hpp)

  static Vec zero() { return _mm256_setzero_ps(); }
  static Vec set1(float x) { return _mm256_set1_ps(x); }
  static Vec load(const float* p) { return _mm256_loadu_ps(p); }
  // Eight elements widened from bf16 (zero-extend, shift into the high half) or IEEE half (F16C).
  static Vec load_bf16(const void* p) {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(static_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
  static Vec load_f16(const void* p) { return _mm256_cvtph_ps(_mm_loadu_si128(static_cast<const __m128i*>(p))); }
  // Eight codes of a quantized KV cache row (attnkit/quantized.hpp) as floats: signed bytes (int8),
  // or the low or high nibbles of eight bytes (int4). And one float16 scale.
  static Vec load_i8(const void* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(static_cast<const __m128i*>(p))));
  }
  static Vec load_u4_low(const void* p) {
    const __m256i bytes = _mm256_cvtepu8_epi32(_mm_loadl_epi64(static_cast<const __m128i*>(p)));
    return _mm256_cvtepi32_ps(_mm256_and_si256(bytes, _mm256_set1_epi32(0xF)));
  }
  static Vec load_u4_high(const void* p) {
    return _mm256_cvtepi32_ps(_mm256_srli_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64(static_cast<const __m128i*>(p))), 4));
  }
  // Eight codes of an fp8 row as floats: E5M2 codes exactly (each is a float16's top byte), E4M3
  // codes divided by 2^8 (ScalarIsa::load_e4m3_over_256's fields, eight at a time). For E4M3 each
  // code is sign-extended to 16 bits and shifted left by 7, which puts its sign at bit 15, a copy of
  // it at bit 14 (cleared), and its exponent and mantissa in a half's fields; the NaN code's
  // magnitude (0x3F80 there) is then given an all-ones exponent.
  static Vec load_e5m2(const void* p) {
    return _mm256_cvtph_ps(_mm_unpacklo_epi8(_mm_setzero_si128(), _mm_loadl_epi64(static_cast<const __m128i*>(p))));
  }
  static Vec load_e4m3_over_256(const void* p) {
    const __m128i fields = _mm_slli_epi16(_mm_cvtepi8_epi16(_mm_loadl_epi64(static_cast<const __m128i*>(p))), 7);
    const __m128i half = _mm_and_si128(fields, _mm_set1_epi16(static_cast<short>(0xBF80)));
    const __m128i nan = _mm_cmpeq_epi16(_mm_and_si128(half, _mm_set1_epi16(0x7F80)), _mm_set1_epi16(0x3F80));
    return _mm256_cvtph_ps(_mm_or_si128(half, _mm_and_si128(nan, _mm_set1_epi16(0x7C00))));
  }
  static float f16_to_float(std::uint16_t bits) { return _cvtsh_ss(bits); }
  // The 4 float16 at p (8 bytes, little-endian) as floats into out[0 .. 4): a quantized row's block
  // parameters, converted together.
  static void f16x4_to_float(const void* p, float* out) {
    _mm_storeu_ps(out, _mm_cvtph_ps(_mm_loadl_epi64(static_cast<const __m128i*>(p))));
  }
  static void store(float* p, Vec v) { _mm256_storeu_ps(p, v); }
  // As ScalarIsa::store_bf16, for 8 lanes: bits + 0x7FFF + the lowest kept bit, truncated; NaN
  // (unordered with itself) keeps its top bits with the quiet bit set.
  static void store_bf16(std::uint16_t* p, Vec v) {
    const __m256i bits = _mm256_castps_si256(v), high = _mm256_srli_epi32(bits, 16);
    const __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(bits, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), _mm256_and_si256(high, _mm256_set1_epi32(1)))), 16);
    const __m256i quiet = _mm256_or_si256(high, _mm256_set1_epi32(0x0040));
    const __m256i halves = _mm256_blendv_epi8(rounded, quiet, _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
    // Eight 16-bit values (each below 2^16, so the unsigned saturation keeps them): packed within
    // each 128-bit half, then the halves' low quadwords brought together.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(halves, halves), _MM_SHUFFLE(3, 1, 2, 0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
  }
  static Vec add(Vec a, Vec b) { return _mm256_add_ps(a, b); }
  static Vec sub(Vec a, Vec b) { return _mm256_sub_ps(a, b); }
  static Vec mul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
  static Vec fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
  static Vec max(Vec a, Vec b) { return _mm256_max_ps(a, b); }  // b when either is NaN
  static Vec min(Vec a, Vec b) { return _mm256_min_ps(a, b); }  // b when either is NaN
  static Vec div(Vec a, Vec b) { return _mm256_div_ps(a, b); }
  static float reduce_max(Vec v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
  }
  static float reduce_add(Vec v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static Vec select_less(Vec a, Vec b, Vec then_value, Vec else_value) {
    return _mm256_blendv_ps(else_value, then_value, _mm256_cmp_ps(a, b, _CMP_LT_OQ));
  }
  static Vec select_equal(Vec a, Vec b, Vec then_value, Vec else_value) {
    return _mm256_blendv_ps(else_value, then_value, _mm256_cmp_ps(a, b, _CMP_EQ_OQ));
  }
  static Vec iota(float start) {
    return _mm256_add_ps(_mm256_set1_ps(start), _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static Vec round_nearest(Vec v) { return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static Vec pow2_int(Vec v) {
    const __m256i exponent = _mm256_add_epi32(_mm256_cvtps_epi32(v), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(exponent, 23));
  }
  // The float whose exponent field is v's low 8 bits (the rest zero): v's bits shifted left by 23.
  static Vec low_bits_to_exponent(Vec v) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(v), 23)); }
  // out[k·out_stride + t] = rows[t][c + k] for t, k < 8.
  static void transpose_into(const float* const* rows, std::int64_t c, float* out, std::int64_t out_stride) {
    transpose_8x8(rows, c, out, out_stride);
  }
  // flags | (v is NaN), lane-wise; any_set tells whether any lane of flags is set.
  static Vec or_nan(Vec flags, Vec v) { return _mm256_or_ps(flags, _mm256_cmp_ps(v, v, _CMP_UNORD_Q)); }
  static bool any_set(Vec flags) { return _mm256_movemask_ps(flags) != 0; }
};

}  // namespace attnkit::cpu
