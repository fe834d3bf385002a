// The f32 FMA ceiling on AVX-512F, compiled with -mavx512f (see tools/attnkit/CMakeLists.txt).
#include <immintrin.h>

#include "bench/peak_loops.hpp"

namespace attnkit::bench {

namespace {

// Two FMA pipes with a 4-cycle latency need 8 independent chains; 16 of the 32 zmm registers covers
// longer latencies and double-pumped units too, with registers to spare.
constexpr int kAccumulators = 16;
constexpr int kLanes = 16;  // floats per zmm register
constexpr int kFlopsPerFmaLane = 2;
// acc = acc · kDecay + kStep converges to 1, so the values never overflow or turn subnormal.
constexpr float kDecay = 0.9999f;
constexpr float kStep = 1e-4f;

volatile float sink;  // keeps the result observable so the loop is not optimised away

}  // namespace

double fma_loop_avx512(std::int64_t iterations) {
  __m512 acc[kAccumulators];
  for (int a = 0; a < kAccumulators; ++a) acc[a] = _mm512_set1_ps(static_cast<float>(a) * kStep);
  const __m512 decay = _mm512_set1_ps(kDecay);
  const __m512 step = _mm512_set1_ps(kStep);
  for (std::int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 16
    for (int a = 0; a < kAccumulators; ++a) acc[a] = _mm512_fmadd_ps(acc[a], decay, step);
  }
  __m512 total = acc[0];
  for (int a = 1; a < kAccumulators; ++a) total = _mm512_add_ps(total, acc[a]);
  // A store, not _mm512_reduce_add_ps: GCC 12 warns inside that intrinsic (-Wuninitialized).
  alignas(64) float lanes[kLanes];
  _mm512_store_ps(lanes, total);
  sink = lanes[0];
  return static_cast<double>(iterations) * kAccumulators * kLanes * kFlopsPerFmaLane;
}

}  // namespace attnkit::bench
