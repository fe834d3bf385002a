// A fallback compute loop for CPUs without AVX2 + FMA (or non-x86 builds), compiled with the build's
// default flags: 128-bit vectors through the compiler's vector extension, multiply then add. It is a
// floor, not the machine's true peak; the report names it so that nobody mistakes it for one.
#include "bench/peak_loops.hpp"

namespace attnkit::bench {

namespace {

using Vec4 = float __attribute__((vector_size(16)));
constexpr int kAccumulators = 12;  // enough independent chains to hide add and multiply latency
constexpr int kLanes = 4;
constexpr int kFlopsPerLane = 2;  // one multiply, one add
constexpr float kDecay = 0.9999f;  // acc = acc · kDecay + kStep converges to 1: no overflow, no subnormals
constexpr float kStep = 1e-4f;

volatile float sink;

}  // namespace

double fma_loop_generic(std::int64_t iterations) {
  Vec4 acc[kAccumulators];
  for (int a = 0; a < kAccumulators; ++a) acc[a] = Vec4{} + static_cast<float>(a) * kStep;
  const Vec4 decay = Vec4{} + kDecay;
  const Vec4 step = Vec4{} + kStep;
  for (std::int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 16
    for (int a = 0; a < kAccumulators; ++a) acc[a] = acc[a] * decay + step;
  }
  Vec4 total = acc[0];
  for (int a = 1; a < kAccumulators; ++a) total += acc[a];
  sink = total[0];
  return static_cast<double>(iterations) * kAccumulators * kLanes * kFlopsPerLane;
}

}  // namespace attnkit::bench
