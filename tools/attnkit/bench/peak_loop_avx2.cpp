// The f32 FMA ceiling on AVX2 + FMA, compiled with -mavx2 -mfma (see tools/attnkit/CMakeLists.txt).
#include <immintrin.h>

#include "bench/peak_loops.hpp"

namespace attnkit::bench {

namespace {

// Two FMA pipes with a 4–5 cycle latency need at least 10 independent chains to stay busy; 12 of the
// 16 ymm registers leaves two for the operands.
constexpr int kAccumulators = 12;
constexpr int kLanes = 8;           // floats per ymm register
constexpr int kFlopsPerFmaLane = 2;
// acc = acc · kDecay + kStep converges to 1, so the values never overflow or turn subnormal.
constexpr float kDecay = 0.9999f;
constexpr float kStep = 1e-4f;

volatile float sink;  // keeps the result observable so the loop is not optimised away

}  // namespace

double fma_loop_avx2(std::int64_t iterations) {
  __m256 acc[kAccumulators];
  for (int a = 0; a < kAccumulators; ++a) acc[a] = _mm256_set1_ps(static_cast<float>(a) * kStep);
  const __m256 decay = _mm256_set1_ps(kDecay);
  const __m256 step = _mm256_set1_ps(kStep);
  for (std::int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 16
    for (int a = 0; a < kAccumulators; ++a) acc[a] = _mm256_fmadd_ps(acc[a], decay, step);
  }
  __m256 total = acc[0];
  for (int a = 1; a < kAccumulators; ++a) total = _mm256_add_ps(total, acc[a]);
  sink = _mm256_cvtss_f32(total);
  return static_cast<double>(iterations) * kAccumulators * kLanes * kFlopsPerFmaLane;
}

}  // namespace attnkit::bench
