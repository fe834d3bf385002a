// The AVX-512 target with AVX512_BF16: bf16 inputs' products by vdpbf16ps, sixteen pairs of bf16
// values per register, accumulated in float32. Included only by the translation unit compiled with
// -mavx512bf16 as well as the AVX-512 target's flags, and only called when the CPU has AVX512_BF16.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "cpu/simd/avx512.hpp"

namespace attnkit::cpu {

struct Avx512Bf16Isa : Avx512Isa {
  static constexpr const char* kName = "avx512_bf16";
  static constexpr bool kDotBf16 = true;
  using Pairs = __m512bh;

  static Pairs load_pairs(const std::uint32_t* p) { return (__m512bh)_mm512_loadu_si512(p); }
  static Pairs broadcast_pair(std::uint32_t pair) { return (__m512bh)_mm512_set1_epi32(static_cast<int>(pair)); }
  // acc + a.hi·b.hi + a.lo·b.lo per lane (vdpbf16ps; bf16_dot_model.hpp says exactly how).
  static Vec dot_bf16(Vec acc, Pairs a, Pairs b) { return _mm512_dpbf16_ps(acc, a, b); }
  // Each float rounded to the nearest bf16 (ties to even), as a float whose low 16 bits are zero;
  // denormal inputs read as zero (of their sign), as round_into_pairs's instruction and dot_bf16 read
  // them, so every path of the target multiplies the same values.
  static Vec round_to_bf16(Vec v) {
    const __m512i bits = _mm512_castps_si512(v);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_add_epi32(bits, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), odd));
    const Vec sign = _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(0x80000000u)));
    const __mmask16 keep = _mm512_cmp_ps_mask(_mm512_andnot_ps(sign, v), set1(0x1p-126f), _CMP_NLT_UQ);  // NaN kept
    const Vec kept = _mm512_castsi512_ps(_mm512_and_si512(rounded, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
    return _mm512_mask_blend_ps(keep, _mm512_and_ps(v, sign), kept);
  }
  // out[j] = (x[2j], x[2j + 1]) rounded to bf16 (ties to even) for j < 16: 32 consecutive floats of
  // one row as the pairs a dot product reads, in one vcvtne2ps2bf16. Denormal inputs read as zero, as
  // round_to_bf16 and dot_bf16 read them; NaN stays NaN.
  static void round_into_pairs(const float* x, std::uint32_t* out) { round_into_pairs(_mm512_loadu_ps(x), _mm512_loadu_ps(x + 16), out); }
  // The same for the 32 floats of two vectors, x[0 .. 16) = low and x[16 .. 32) = high.
  static void round_into_pairs(Vec low, Vec high, std::uint32_t* out) {
    _mm512_storeu_si512(out, (__m512i)_mm512_cvtne2ps_pbh(high, low));
  }
  // The pairs (even[c], odd[c]) of two bf16 rows for 32 columns c (two keys' values, for a product
  // that sums over keys), in the target's pair order: one unpack each (within 128-bit lanes), so
  // out[0] holds columns 0–3, 8–11, 16–19, 24–27 and out[1] the others. to_pair_order and
  // from_pair_order move 32 float columns (a: 0–15, b: 16–31) into that order and back, so that
  // accumulators for the columns can be kept in it.
  static void pair_rows_32(const std::uint16_t* even, const std::uint16_t* odd, Pairs* out) {
    const __m512i e = _mm512_loadu_si512(even), o = _mm512_loadu_si512(odd);
    out[0] = (__m512bh)_mm512_unpacklo_epi16(e, o);
    out[1] = (__m512bh)_mm512_unpackhi_epi16(e, o);
  }
  static void to_pair_order(Vec& a, Vec& b) {
    const Vec low = _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)), high = _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1));
    a = low;
    b = high;
  }
  static void from_pair_order(Vec& a, Vec& b) {
    const Vec front = _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)), back = _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2));
    a = _mm512_shuffle_f32x4(front, front, _MM_SHUFFLE(3, 1, 2, 0));
    b = _mm512_shuffle_f32x4(back, back, _MM_SHUFFLE(3, 1, 2, 0));
  }
  // out[i] = the pair (even[i], odd[i]) for 16 lanes of floats that hold bf16 values (rounded
  // already): two rows' upper halves interleaved, so that a product sums over the two rows.
  static void store_row_pairs(Vec even, Vec odd, std::uint32_t* out) {
    const __m512i low = _mm512_srli_epi32(_mm512_castps_si512(even), 16);
    const __m512i high = _mm512_and_si512(_mm512_castps_si512(odd), _mm512_set1_epi32(static_cast<int>(0xFFFF0000u)));
    _mm512_storeu_si512(out, _mm512_or_si512(low, high));
  }
  // out[i] = even[i] | odd[i] << 16 for 16 lanes: the pairs of two bf16 rows. Returns whether any of
  // the 32 values is ±inf or NaN (exponent all ones).
  static bool interleave_bf16(const std::uint16_t* even, const std::uint16_t* odd, std::uint32_t* out) {
    return interleave_16bit(even, odd, out, 0x7F80);
  }
  // The same for any 16-bit float format whose exponent bits are `exponent`.
  static bool interleave_16bit(const std::uint16_t* even, const std::uint16_t* odd, std::uint32_t* out, std::uint16_t exponent) {
    const __m512i e = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(even)));
    const __m512i o = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(odd)));
    const __m512i pairs = _mm512_or_si512(e, _mm512_slli_epi32(o, 16));
    _mm512_storeu_si512(out, pairs);
    const __m512i ones = _mm512_set1_epi16(static_cast<short>(exponent));
    return _mm512_cmpeq_epi16_mask(_mm512_and_si512(pairs, ones), ones) != 0;
  }
};

}  // namespace attnkit::cpu
