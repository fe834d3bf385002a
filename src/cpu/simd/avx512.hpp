// Sixteen floats in a 512-bit AVX-512 register (AVX-512F/BW/VL/DQ), 32 vector registers. Included
// only by translation units compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq (and -mfma
// -mf16c), and only called when the CPU has all of them.
#pragma once

#include <immintrin.h>

#include <array>
#include <cstdint>

#include "cpu/geometry.hpp"
#include "cpu/simd/transpose_8x8.hpp"

namespace attnkit::cpu {

struct Avx512Isa {
  using Vec = __m512;
  static constexpr int kLanes = 16;
  static constexpr const char* kName = "avx512";
  static constexpr Geometry kGeometry = kAvx512Geometry;  // geometry.hpp
  static constexpr bool kDotBf16 = false;  // bf16 products through f32 FMA
  static constexpr bool kTiles = false;     // no matrix tiles (amx.hpp)
  static constexpr bool kTilesF16 = false;  // no f16 products on tiles (amx.hpp)

  static Vec zero() { return _mm512_setzero_ps(); }
  static Vec set1(float x) { return _mm512_set1_ps(x); }
  static Vec load(const float* p) { return _mm512_loadu_ps(p); }
  // Sixteen elements widened from bf16 (zero-extend, shift into the high half) or IEEE half.
  static Vec load_bf16(const void* p) {
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(static_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
  }
  static Vec load_f16(const void* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(static_cast<const __m256i*>(p))); }
  // Sixteen codes of a quantized KV cache row as floats (avx2.hpp's, on 16 bytes), and one scale.
  static Vec load_i8(const void* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(static_cast<const __m128i*>(p))));
  }
  static Vec load_u4_low(const void* p) {
    const __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128(static_cast<const __m128i*>(p)));
    return _mm512_cvtepi32_ps(_mm512_and_si512(bytes, _mm512_set1_epi32(0xF)));
  }
  static Vec load_u4_high(const void* p) {
    return _mm512_cvtepi32_ps(_mm512_srli_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128(static_cast<const __m128i*>(p))), 4));
  }
  // The 4-bit codes in the low (high) nibbles of the 16 bytes at p, each replaced by table[code]:
  // an int4 block's values, offset + code · scale, worked out once per block as a table of 16, so
  // that a vector costs a widening and a vpermps (which reads only each index's low 4 bits) in place
  // of a mask or shift, a conversion and a multiply-add.
  static Vec lookup_u4_low(Vec table, const void* p) {
    return _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(static_cast<const __m128i*>(p))), table);
  }
  static Vec lookup_u4_high(Vec table, const void* p) {
    const __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128(static_cast<const __m128i*>(p)));
    return _mm512_permutexvar_ps(_mm512_srli_epi32(bytes, 4), table);
  }
  // Sixteen codes of an fp8 row as floats (avx2.hpp's, on 16 bytes; the NaN code's exponent set
  // under a mask).
  static Vec load_e5m2(const void* p) {
    return _mm512_cvtph_ps(_mm256_slli_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128(static_cast<const __m128i*>(p))), 8));
  }
  static Vec load_e4m3_over_256(const void* p) {
    const __m256i fields = _mm256_slli_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128(static_cast<const __m128i*>(p))), 7);
    const __m256i half = _mm256_and_si256(fields, _mm256_set1_epi16(static_cast<short>(0xBF80)));
    const __mmask16 nan = _mm256_cmpeq_epi16_mask(_mm256_and_si256(half, _mm256_set1_epi16(0x7F80)), _mm256_set1_epi16(0x3F80));
    return _mm512_cvtph_ps(_mm256_or_si256(half, _mm256_maskz_mov_epi16(nan, _mm256_set1_epi16(0x7C00))));
  }
  static float f16_to_float(std::uint16_t bits) { return _cvtsh_ss(bits); }
  // As Avx2Isa::f16x4_to_float.
  static void f16x4_to_float(const void* p, float* out) {
    _mm_storeu_ps(out, _mm_cvtph_ps(_mm_loadl_epi64(static_cast<const __m128i*>(p))));
  }
  static void store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
  // As ScalarIsa::store_bf16, for 16 lanes (avx2.hpp says how), narrowed by one vpmovdw.
  static void store_bf16(std::uint16_t* p, Vec v) {
    const __m512i bits = _mm512_castps_si512(v), high = _mm512_srli_epi32(bits, 16);
    const __m512i rounded = _mm512_srli_epi32(
        _mm512_add_epi32(bits, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), _mm512_and_si512(high, _mm512_set1_epi32(1)))), 16);
    const __m512i quiet = _mm512_or_si512(high, _mm512_set1_epi32(0x0040));
    const __m512i halves = _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), rounded, quiet);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(halves));
  }
  static Vec add(Vec a, Vec b) { return _mm512_add_ps(a, b); }
  static Vec sub(Vec a, Vec b) { return _mm512_sub_ps(a, b); }
  static Vec mul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
  static Vec fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
  static Vec max(Vec a, Vec b) { return _mm512_max_ps(a, b); }  // b when either is NaN
  static Vec min(Vec a, Vec b) { return _mm512_min_ps(a, b); }  // b when either is NaN
  static Vec div(Vec a, Vec b) { return _mm512_div_ps(a, b); }
  static float reduce_max(Vec v) {
    const __m256 half = _mm256_max_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(half), _mm256_extractf128_ps(half, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
  }
  static float reduce_add(Vec v) {
    const __m256 half = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(half), _mm256_extractf128_ps(half, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  // out[i] = reduce_add(v[i]) for i < Count <= 16, bit for bit, by one tree over all of them: each
  // level adds the same lanes reduce_add adds at its step (i + 8, i + 4, i + 2, i + 1), for two
  // vectors per instruction at the first level and sixteen at the last. 47 instructions for 16 sums
  // in place of about 130 (decoding's scores end in one such sum per key and query row).
  template <std::int64_t Count>
  __attribute__((always_inline)) static void reduce_add_each(const Vec* v, float* out) {
    static constexpr auto kOrder = [] {  // vector i's sum into lane i
      std::array<int, 16> lanes{};
      for (std::int64_t i = 0; i < 16; ++i) lanes[i] = tree_lane(i);
      return lanes;
    }();
    _mm512_mask_storeu_ps(out, static_cast<__mmask16>((1u << Count) - 1),
                          _mm512_permutexvar_ps(_mm512_loadu_si512(kOrder.data()), sum_tree<Count>(v)));
  }
  // The same sums of v[t·Rows + r] (t < Keys, r < Rows), times `scale`, stored by row:
  // out[r·row_stride + t]. Straight from the tree's register to each row's Keys floats (one permute
  // and one masked store a row): through an array of sums, decoding's score loop stalls on reading
  // back the masked store's floats one by one. With this, and the step inlined into the key loop,
  // decoding from the last-level cache measured 1.08–1.18x faster on an AVX-512 Zen 5, 1 thread (from
  // memory even: there the memory is the limit). See docs/tuning.md, "The score loop".
  template <std::int64_t Rows, std::int64_t Keys>
  __attribute__((always_inline)) static void reduce_add_each_by_row(const Vec* v, float scale, float* out,
                                                                    std::int64_t row_stride) {
    static_assert(Rows >= 1 && Keys >= 1 && Rows * Keys <= 16);
    static constexpr auto kLanesOfRow = [] {  // row r's keys t < Keys: vectors t·Rows + r
      std::array<std::array<int, 16>, Rows> lanes{};
      for (std::int64_t r = 0; r < Rows; ++r)
        for (std::int64_t t = 0; t < Keys; ++t) lanes[r][t] = tree_lane(t * Rows + r);
      return lanes;
    }();
    const Vec sums = mul(sum_tree<Rows * Keys>(v), set1(scale));
    for (std::int64_t r = 0; r < Rows; ++r) {
      _mm512_mask_storeu_ps(out + r * row_stride, static_cast<__mmask16>((1u << Keys) - 1),
                            _mm512_permutexvar_ps(_mm512_loadu_si512(kLanesOfRow[r].data()), sums));
    }
  }
  // The lane of sum_tree's result that holds vector i's sum.
  static constexpr int tree_lane(std::int64_t i) { return static_cast<int>(4 * (i % 4) + i / 4); }
  // The tree of reduce_add_each: lane 4k + j holds the sum of vector 4j + k (zero past Count).
  // Inlined: out of line, its sixteen vectors went through memory.
  template <std::int64_t Count>
  __attribute__((always_inline)) static Vec sum_tree(const Vec* v) {
    static_assert(Count >= 1 && Count <= 16);
    Vec level[16];
    for (int i = 0; i < 16; ++i) level[i] = i < Count ? v[i] : zero();
    // Quarters (128 bits) 0 + 2 and 1 + 3 of each vector: vectors 2i and 2i + 1 in one.
    for (int i = 0; i < 8; ++i)
      level[i] = add(_mm512_shuffle_f32x4(level[2 * i], level[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                     _mm512_shuffle_f32x4(level[2 * i], level[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    // Those two halves added: quarter k of level[i] now holds vector 4i + k's four partial sums.
    for (int i = 0; i < 4; ++i)
      level[i] = add(_mm512_shuffle_f32x4(level[2 * i], level[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                     _mm512_shuffle_f32x4(level[2 * i], level[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    // Within each quarter: lanes 0 + 2 and 1 + 3, then the two sums.
    for (int i = 0; i < 2; ++i)
      level[i] = add(_mm512_shuffle_ps(level[2 * i], level[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                     _mm512_shuffle_ps(level[2 * i], level[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    return add(_mm512_shuffle_ps(level[0], level[1], _MM_SHUFFLE(2, 0, 2, 0)),
               _mm512_shuffle_ps(level[0], level[1], _MM_SHUFFLE(3, 1, 3, 1)));
  }
  static Vec select_less(Vec a, Vec b, Vec then_value, Vec else_value) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_LT_OQ), else_value, then_value);
  }
  static Vec select_equal(Vec a, Vec b, Vec then_value, Vec else_value) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ), else_value, then_value);
  }
  static Vec iota(float start) {
    return _mm512_add_ps(_mm512_set1_ps(start),
                         _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  }
  static Vec round_nearest(Vec v) { return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static Vec pow2_int(Vec v) {
    const __m512i exponent = _mm512_add_epi32(_mm512_cvtps_epi32(v), _mm512_set1_epi32(127));
    return _mm512_castsi512_ps(_mm512_slli_epi32(exponent, 23));
  }
  // The float whose exponent field is v's low 8 bits (the rest zero): v's bits shifted left by 23.
  static Vec low_bits_to_exponent(Vec v) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_castps_si512(v), 23)); }
  // out[k·out_stride + t] = rows[t][c + k] for t, k < 16 (packing is not the hot loop: four 8 × 8
  // transposes in 256-bit registers serve).
  static void transpose_into(const float* const* rows, std::int64_t c, float* out, std::int64_t out_stride) {
    transpose_16x16(rows, c, out, out_stride);
  }
  // flags | (v is NaN), lane-wise, kept as all-ones lanes; any_set tells whether any lane is set.
  static Vec or_nan(Vec flags, Vec v) {
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    return _mm512_mask_mov_ps(flags, nan, _mm512_castsi512_ps(_mm512_set1_epi32(-1)));
  }
  static bool any_set(Vec flags) {
    return _mm512_test_epi32_mask(_mm512_castps_si512(flags), _mm512_castps_si512(flags)) != 0;
  }
};

}  // namespace attnkit::cpu
