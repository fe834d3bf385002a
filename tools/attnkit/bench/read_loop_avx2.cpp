// The read loop on AVX2, compiled with -mavx2 (see tools/attnkit/CMakeLists.txt): one 256-bit load
// reads half a cache line; a Zen 3 core read about 1.4× as fast this way as with the 128-bit loop.
#include <immintrin.h>

#include "bench/read_loops.hpp"

namespace attnkit::bench {

std::uint64_t read_loop_avx2(const std::byte* begin, std::size_t bytes, std::size_t ahead) {
  constexpr std::size_t kStep = 64;  // bytes per stream per step: a cache line as two vectors
  const std::size_t half = bytes / 2;
  const std::byte* second = begin + half;
  __m256i sums[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
  for (std::size_t at = 0; at + kStep <= half; at += kStep) {
    if (ahead != 0 && at + ahead < half) {
      _mm_prefetch(reinterpret_cast<const char*>(begin + at + ahead), _MM_HINT_T1);
      _mm_prefetch(reinterpret_cast<const char*>(second + at + ahead), _MM_HINT_T1);
    }
    for (int v = 0; v < 2; ++v) {
      sums[v] = _mm256_add_epi64(sums[v], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(begin + at + 32 * v)));
      sums[2 + v] = _mm256_add_epi64(sums[2 + v], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(second + at + 32 * v)));
    }
  }
  const __m256i total = _mm256_add_epi64(_mm256_add_epi64(sums[0], sums[1]), _mm256_add_epi64(sums[2], sums[3]));
  alignas(32) std::uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), total);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

}  // namespace attnkit::bench
