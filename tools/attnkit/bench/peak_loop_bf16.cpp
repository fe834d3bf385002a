// The bf16 dot-product ceiling (vdpbf16ps), compiled with -mavx512f -mavx512bf16 (see
// tools/attnkit/CMakeLists.txt). One vdpbf16ps multiplies 16 × 2 bf16 pairs and adds both products
// into 16 f32 lanes: 64 floating-point operations, the count a bf16 attention kernel is measured by.
#include <immintrin.h>

#include "bench/peak_loops.hpp"

namespace attnkit::bench {

namespace {

constexpr int kAccumulators = 16;  // as for the f32 loop: covers latency × pipes, half the zmm registers
constexpr int kLanes = 16;         // f32 accumulators per zmm register
constexpr int kPairsPerLane = 2;   // bf16 products summed into each lane
constexpr int kFlopsPerProduct = 2;
// Operands of 1e-3: each instruction adds 2e-6 per lane, so even 1e10 iterations stay far from
// overflow, and nothing is subnormal.
constexpr float kOperand = 1e-3f;

volatile float sink;  // keeps the result observable so the loop is not optimised away

}  // namespace

double bf16_dot_loop_avx512(std::int64_t iterations) {
  __m512 acc[kAccumulators];
  for (int a = 0; a < kAccumulators; ++a) acc[a] = _mm512_setzero_ps();
  const __m512 operand = _mm512_set1_ps(kOperand);
  const __m512bh x = _mm512_cvtne2ps_pbh(operand, operand);
  const __m512bh y = x;
  for (std::int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 16
    for (int a = 0; a < kAccumulators; ++a) acc[a] = _mm512_dpbf16_ps(acc[a], x, y);
  }
  __m512 total = acc[0];
  for (int a = 1; a < kAccumulators; ++a) total = _mm512_add_ps(total, acc[a]);
  // A store, not _mm512_reduce_add_ps: GCC 12 warns inside that intrinsic (-Wuninitialized).
  alignas(64) float lanes[kLanes];
  _mm512_store_ps(lanes, total);
  sink = lanes[0];
  return static_cast<double>(iterations) * kAccumulators * kLanes * kPairsPerLane * kFlopsPerProduct;
}

}  // namespace attnkit::bench
