// An 8 × 8 float transpose in 256-bit registers, for the x86 targets' packing (avx2.hpp, avx512.hpp).
// `static` on purpose: each kernel translation unit, compiled for its own instruction set, keeps its
// own copy, so the linker can never hand an AVX-512 build of it to a CPU without AVX-512.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace attnkit::cpu {

// out[k·out_stride + t] = rows[t][c + k] for t, k < 8: pairs interleaved, then quads, then 128-bit
// halves swapped.
[[maybe_unused]] static inline void transpose_8x8(const float* const* rows, std::int64_t c, float* out,
                                                  std::int64_t out_stride) {
  __m256 r[8], pairs[8], quads[8];
  for (int t = 0; t < 8; ++t) r[t] = _mm256_loadu_ps(rows[t] + c);
  for (int t = 0; t < 8; t += 2) {
    pairs[t] = _mm256_unpacklo_ps(r[t], r[t + 1]);
    pairs[t + 1] = _mm256_unpackhi_ps(r[t], r[t + 1]);
  }
  for (int t = 0; t < 8; t += 4) {
    quads[t] = _mm256_shuffle_ps(pairs[t], pairs[t + 2], _MM_SHUFFLE(1, 0, 1, 0));
    quads[t + 1] = _mm256_shuffle_ps(pairs[t], pairs[t + 2], _MM_SHUFFLE(3, 2, 3, 2));
    quads[t + 2] = _mm256_shuffle_ps(pairs[t + 1], pairs[t + 3], _MM_SHUFFLE(1, 0, 1, 0));
    quads[t + 3] = _mm256_shuffle_ps(pairs[t + 1], pairs[t + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int k = 0; k < 4; ++k) {
    _mm256_storeu_ps(out + k * out_stride, _mm256_permute2f128_ps(quads[k], quads[k + 4], 0x20));
    _mm256_storeu_ps(out + (k + 4) * out_stride, _mm256_permute2f128_ps(quads[k], quads[k + 4], 0x31));
  }
}

// The same for 16 × 16: four 8 × 8 blocks, each landing in its mirrored place.
[[maybe_unused]] static inline void transpose_16x16(const float* const* rows, std::int64_t c, float* out,
                                                    std::int64_t out_stride) {
  for (int t0 = 0; t0 < 16; t0 += 8)
    for (int k0 = 0; k0 < 16; k0 += 8) transpose_8x8(rows + t0, c + k0, out + k0 * out_stride + t0, out_stride);
}

}  // namespace attnkit::cpu
