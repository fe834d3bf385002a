// The avx512 target's reduction tree (Avx512Isa::reduce_add_each) beside its one-vector reduce_add,
// for tests/cpu/test_targets.cpp (AVX-512 flags; called only on CPUs that have AVX-512).
#include <utility>

#include "cpu/lane_sums.hpp"
#include "cpu/simd/avx512.hpp"

namespace attnkit::testing {

using Isa = cpu::Avx512Isa;

void avx512_lane_sums(const float* vectors, int count, float* tree, float* one_by_one) {
  Isa::Vec v[16];
  for (int i = 0; i < count; ++i) v[i] = Isa::load(vectors + i * kSumLanes);
  for (int i = 0; i < count; ++i) one_by_one[i] = Isa::reduce_add(v[i]);
  [&]<int... C>(std::integer_sequence<int, C...>) {
    (void)((count == C + 1 ? (Isa::reduce_add_each<C + 1>(v, tree), true) : false) || ...);
  }(std::make_integer_sequence<int, 16>{});
}

}  // namespace attnkit::testing
