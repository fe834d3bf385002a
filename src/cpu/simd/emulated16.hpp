// A 16-lane "vector" made of two 8-lane AVX2 halves: the AVX-512 target's geometry (tile shapes,
// tails, paddings, lane counts) run on any CPU with AVX2, so that every machine tests the code paths
// of the 16-lane kernels, not only those that have AVX-512. Each operation is the AVX2 one on both
// halves, so results equal a real 16-lane run up to the order of the cross-lane reductions.
// Compiled with the AVX2 target's flags.
#pragma once

#include <cstdint>

#include "cpu/geometry.hpp"
#include "cpu/simd/avx2.hpp"

namespace attnkit::cpu {

struct Emulated16Isa {
  struct Vec {
    Avx2Isa::Vec lo, hi;
  };
  static constexpr int kLanes = 16;
  static constexpr const char* kName = "avx512_emulated";
  static constexpr Geometry kGeometry = kAvx512Geometry;  // the real AVX-512 target's tiles
  static constexpr bool kDotBf16 = false;
  static constexpr bool kTiles = false;     // no matrix tiles (amx.hpp)
  static constexpr bool kTilesF16 = false;  // no f16 products on tiles (amx.hpp)
  static_assert(kLanes == 2 * Avx2Isa::kLanes && kLanes == kGeometry.lanes);

  static Vec zero() { return {Avx2Isa::zero(), Avx2Isa::zero()}; }
  static Vec set1(float x) { return {Avx2Isa::set1(x), Avx2Isa::set1(x)}; }
  static Vec load(const float* p) { return {Avx2Isa::load(p), Avx2Isa::load(p + 8)}; }
  static Vec load_bf16(const void* p) {
    return {Avx2Isa::load_bf16(p), Avx2Isa::load_bf16(static_cast<const std::uint16_t*>(p) + 8)};
  }
  static Vec load_f16(const void* p) {
    return {Avx2Isa::load_f16(p), Avx2Isa::load_f16(static_cast<const std::uint16_t*>(p) + 8)};
  }
  static Vec load_i8(const void* p) {
    return {Avx2Isa::load_i8(p), Avx2Isa::load_i8(static_cast<const std::uint8_t*>(p) + 8)};
  }
  static Vec load_u4_low(const void* p) {
    return {Avx2Isa::load_u4_low(p), Avx2Isa::load_u4_low(static_cast<const std::uint8_t*>(p) + 8)};
  }
  static Vec load_u4_high(const void* p) {
    return {Avx2Isa::load_u4_high(p), Avx2Isa::load_u4_high(static_cast<const std::uint8_t*>(p) + 8)};
  }
  // As Avx512Isa's table lookups, 8 lanes at a time: each lane's code picks from the table's low
  // or high half by its bit 3 (moved to the sign bit for the blend).
  static Vec lookup_u4_low(Vec table, const void* p) {
    const auto* bytes = static_cast<const std::uint8_t*>(p);
    return {lookup(table, codes_of(bytes)), lookup(table, codes_of(bytes + 8))};
  }
  static Vec lookup_u4_high(Vec table, const void* p) {
    const auto* bytes = static_cast<const std::uint8_t*>(p);
    return {lookup(table, _mm256_srli_epi32(codes_of(bytes), 4)), lookup(table, _mm256_srli_epi32(codes_of(bytes + 8), 4))};
  }
  static Vec load_e5m2(const void* p) {
    return {Avx2Isa::load_e5m2(p), Avx2Isa::load_e5m2(static_cast<const std::uint8_t*>(p) + 8)};
  }
  static Vec load_e4m3_over_256(const void* p) {
    return {Avx2Isa::load_e4m3_over_256(p), Avx2Isa::load_e4m3_over_256(static_cast<const std::uint8_t*>(p) + 8)};
  }
  static float f16_to_float(std::uint16_t bits) { return Avx2Isa::f16_to_float(bits); }
  static void f16x4_to_float(const void* p, float* out) { Avx2Isa::f16x4_to_float(p, out); }
  static void store(float* p, Vec v) {
    Avx2Isa::store(p, v.lo);
    Avx2Isa::store(p + 8, v.hi);
  }
  static void store_bf16(std::uint16_t* p, Vec v) {
    Avx2Isa::store_bf16(p, v.lo);
    Avx2Isa::store_bf16(p + 8, v.hi);
  }
  static Vec add(Vec a, Vec b) { return {Avx2Isa::add(a.lo, b.lo), Avx2Isa::add(a.hi, b.hi)}; }
  static Vec sub(Vec a, Vec b) { return {Avx2Isa::sub(a.lo, b.lo), Avx2Isa::sub(a.hi, b.hi)}; }
  static Vec mul(Vec a, Vec b) { return {Avx2Isa::mul(a.lo, b.lo), Avx2Isa::mul(a.hi, b.hi)}; }
  static Vec fma(Vec a, Vec b, Vec c) { return {Avx2Isa::fma(a.lo, b.lo, c.lo), Avx2Isa::fma(a.hi, b.hi, c.hi)}; }
  static Vec max(Vec a, Vec b) { return {Avx2Isa::max(a.lo, b.lo), Avx2Isa::max(a.hi, b.hi)}; }
  static Vec min(Vec a, Vec b) { return {Avx2Isa::min(a.lo, b.lo), Avx2Isa::min(a.hi, b.hi)}; }
  static Vec div(Vec a, Vec b) { return {Avx2Isa::div(a.lo, b.lo), Avx2Isa::div(a.hi, b.hi)}; }
  static float reduce_max(Vec v) { return Avx2Isa::reduce_max(Avx2Isa::max(v.lo, v.hi)); }
  static float reduce_add(Vec v) { return Avx2Isa::reduce_add(Avx2Isa::add(v.lo, v.hi)); }
  static Vec select_less(Vec a, Vec b, Vec then_value, Vec else_value) {
    return {Avx2Isa::select_less(a.lo, b.lo, then_value.lo, else_value.lo),
            Avx2Isa::select_less(a.hi, b.hi, then_value.hi, else_value.hi)};
  }
  static Vec select_equal(Vec a, Vec b, Vec then_value, Vec else_value) {
    return {Avx2Isa::select_equal(a.lo, b.lo, then_value.lo, else_value.lo),
            Avx2Isa::select_equal(a.hi, b.hi, then_value.hi, else_value.hi)};
  }
  static Vec iota(float start) { return {Avx2Isa::iota(start), Avx2Isa::iota(start + 8)}; }
  static Vec round_nearest(Vec v) { return {Avx2Isa::round_nearest(v.lo), Avx2Isa::round_nearest(v.hi)}; }
  static Vec pow2_int(Vec v) { return {Avx2Isa::pow2_int(v.lo), Avx2Isa::pow2_int(v.hi)}; }
  static Vec low_bits_to_exponent(Vec v) {
    return {Avx2Isa::low_bits_to_exponent(v.lo), Avx2Isa::low_bits_to_exponent(v.hi)};
  }
  static void transpose_into(const float* const* rows, std::int64_t c, float* out, std::int64_t out_stride) {
    transpose_16x16(rows, c, out, out_stride);
  }
  static Vec or_nan(Vec flags, Vec v) { return {Avx2Isa::or_nan(flags.lo, v.lo), Avx2Isa::or_nan(flags.hi, v.hi)}; }
  static bool any_set(Vec flags) { return Avx2Isa::any_set(flags.lo) || Avx2Isa::any_set(flags.hi); }

 private:
  static __m256i codes_of(const std::uint8_t* p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))); }
  static __m256 lookup(Vec table, __m256i index) {
    const __m256 low = _mm256_permutevar8x32_ps(table.lo, index), high = _mm256_permutevar8x32_ps(table.hi, index);
    return _mm256_blendv_ps(low, high, _mm256_castsi256_ps(_mm256_slli_epi32(index, 28)));
  }
};

}  // namespace attnkit::cpu

namespace attnkit::cpu {

// The emulated 16-lane target with bf16 dot products: vdpbf16ps by its model (bf16_dot_model.hpp) in
// AVX2 arithmetic, so the pair packing and P rounding of the avx512_bf16 target run on any AVX2 CPU.
struct Emulated16Bf16Isa : Emulated16Isa {
  static constexpr const char* kName = "avx512_bf16_emulated";
  static constexpr bool kDotBf16 = true;
  struct Pairs {
    __m256i lo, hi;  // lanes 0–7 and 8–15, each a pair of bf16 values
  };

  static Pairs load_pairs(const std::uint32_t* p) {
    return {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 8))};
  }
  static Pairs broadcast_pair(std::uint32_t pair) {
    const __m256i v = _mm256_set1_epi32(static_cast<int>(pair));
    return {v, v};
  }
  // acc + a.hi·b.hi + a.lo·b.lo per lane, as dot_bf16_pair does it.
  static Vec dot_bf16(Vec acc, Pairs a, Pairs b) { return {dot_half(acc.lo, a.lo, b.lo), dot_half(acc.hi, a.hi, b.hi)}; }
  // Each float rounded to the nearest bf16 (ties to even), as a float whose low 16 bits are zero;
  // denormal inputs read as zero, as the avx512_bf16 target does.
  static Vec round_to_bf16(Vec v) { return {round_half(flush(v.lo)), round_half(flush(v.hi))}; }
  // out[j] = (x[2j], x[2j + 1]) rounded to bf16 (ties to even) for j < 16, as the avx512_bf16
  // target's vcvtne2ps2bf16 does it: denormal inputs read as zero.
  static void round_into_pairs(const float* x, std::uint32_t* out) {
    std::uint32_t rounded[32];
    for (int h = 0; h < 32; h += 8)
      _mm256_storeu_ps(reinterpret_cast<float*>(rounded + h), round_half(flush(_mm256_loadu_ps(x + h))));
    for (int j = 0; j < 16; ++j) out[j] = rounded[2 * j] >> 16 | (rounded[2 * j + 1] & 0xFFFF0000u);
  }
  // The same for the 32 floats of two vectors, x[0 .. 16) = low and x[16 .. 32) = high.
  static void round_into_pairs(Vec low, Vec high, std::uint32_t* out) {
    float x[32];
    store(x, low);
    store(x + 16, high);
    round_into_pairs(x, out);
  }
  // The pairs of two bf16 rows for 32 columns in the avx512_bf16 target's pair order (its
  // pair_rows_32: out[0] columns 0–3, 8–11, 16–19, 24–27, out[1] the others), by the same unpacks
  // on 128-bit lanes, and the same moves of float columns into that order and back.
  static void pair_rows_32(const std::uint16_t* even, const std::uint16_t* odd, Pairs* out) {
    const __m256i e_front = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(even));
    const __m256i o_front = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(odd));
    const __m256i e_back = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(even + 16));
    const __m256i o_back = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(odd + 16));
    out[0] = {_mm256_unpacklo_epi16(e_front, o_front), _mm256_unpacklo_epi16(e_back, o_back)};
    out[1] = {_mm256_unpackhi_epi16(e_front, o_front), _mm256_unpackhi_epi16(e_back, o_back)};
  }
  static void to_pair_order(Vec& a, Vec& b) {
    const Vec low = {_mm256_permute2f128_ps(a.lo, a.hi, 0x20), _mm256_permute2f128_ps(b.lo, b.hi, 0x20)};
    const Vec high = {_mm256_permute2f128_ps(a.lo, a.hi, 0x31), _mm256_permute2f128_ps(b.lo, b.hi, 0x31)};
    a = low;
    b = high;
  }
  static void from_pair_order(Vec& a, Vec& b) {
    const Vec front = {_mm256_permute2f128_ps(a.lo, b.lo, 0x20), _mm256_permute2f128_ps(a.lo, b.lo, 0x31)};
    const Vec back = {_mm256_permute2f128_ps(a.hi, b.hi, 0x20), _mm256_permute2f128_ps(a.hi, b.hi, 0x31)};
    a = front;
    b = back;
  }
  // out[i] = the pair (even[i], odd[i]) for 16 lanes of floats that hold bf16 values, as the
  // avx512_bf16 target's store_row_pairs.
  static void store_row_pairs(Vec even, Vec odd, std::uint32_t* out) {
    const __m256i high = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
    const auto pair_half = [&](__m256 e, __m256 o, std::uint32_t* half) {
      const __m256i pairs = _mm256_or_si256(_mm256_srli_epi32(_mm256_castps_si256(e), 16),
                                            _mm256_and_si256(_mm256_castps_si256(o), high));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(half), pairs);
    };
    pair_half(even.lo, odd.lo, out);
    pair_half(even.hi, odd.hi, out + 8);
  }
  // out[i] = even[i] | odd[i] << 16 for 16 lanes: the pairs of two bf16 rows. Returns whether any of
  // the 32 values is ±inf or NaN (exponent all ones).
  static bool interleave_bf16(const std::uint16_t* even, const std::uint16_t* odd, std::uint32_t* out) {
    return interleave_16bit(even, odd, out, 0x7F80);
  }
  // The same for any 16-bit float format whose exponent bits are `exponent_bits`.
  static bool interleave_16bit(const std::uint16_t* even, const std::uint16_t* odd, std::uint32_t* out,
                               std::uint16_t exponent_bits) {
    const __m256i exponent = _mm256_set1_epi16(static_cast<short>(exponent_bits));
    __m256i special = _mm256_setzero_si256();
    for (int h = 0; h < 16; h += 8) {
      const __m256i e = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(even + h)));
      const __m256i o = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(odd + h)));
      const __m256i pairs = _mm256_or_si256(e, _mm256_slli_epi32(o, 16));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + h), pairs);
      special = _mm256_or_si256(special, _mm256_cmpeq_epi16(_mm256_and_si256(pairs, exponent), exponent));
    }
    return !_mm256_testz_si256(special, special);
  }

 private:
  // Denormals (0 < |x| < 2^−126) become a zero of their sign; everything else stays.
  static __m256 flush(__m256 x) {
    const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(0x80000000u)));
    const __m256 magnitude = _mm256_andnot_ps(sign, x);
    return _mm256_blendv_ps(x, _mm256_and_ps(x, sign), _mm256_cmp_ps(magnitude, _mm256_set1_ps(0x1p-126f), _CMP_LT_OQ));
  }
  static __m256 dot_half(__m256 acc, __m256i a, __m256i b) {
    const __m256i high = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
    const __m256 a_hi = flush(_mm256_castsi256_ps(_mm256_and_si256(a, high)));
    const __m256 b_hi = flush(_mm256_castsi256_ps(_mm256_and_si256(b, high)));
    const __m256 a_lo = flush(_mm256_castsi256_ps(_mm256_slli_epi32(a, 16)));
    const __m256 b_lo = flush(_mm256_castsi256_ps(_mm256_slli_epi32(b, 16)));
    acc = flush(_mm256_fmadd_ps(a_hi, b_hi, flush(acc)));
    return flush(_mm256_fmadd_ps(a_lo, b_lo, acc));
  }
  static __m256 round_half(__m256 v) {
    const __m256i bits = _mm256_castps_si256(v);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_add_epi32(bits, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), odd));
    return _mm256_castsi256_ps(_mm256_and_si256(rounded, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
  }
};

}  // namespace attnkit::cpu
