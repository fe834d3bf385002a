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

template <int Rows, int Keys>
bool avx512_lane_sums_by_row_if(int rows, int keys, const Isa::Vec* v, float scale, float* out, int row_stride) {
  if constexpr (Rows * Keys <= 16) {
    if (rows == Rows && keys == Keys) {
      Isa::reduce_add_each_by_row<Rows, Keys>(v, scale, out, row_stride);
      return true;
    }
  }
  return false;
}

template <int Rows, int... K>
bool avx512_lane_sums_by_row_any_keys(std::integer_sequence<int, K...>, int rows, int keys, const Isa::Vec* v,
                                      float scale, float* out, int row_stride) {
  return (avx512_lane_sums_by_row_if<Rows, K + 1>(rows, keys, v, scale, out, row_stride) || ...);
}

void avx512_lane_sums_by_row(const float* vectors, int rows, int keys, float scale, float* out, int row_stride) {
  Isa::Vec v[16];
  for (int i = 0; i < rows * keys && i < 16; ++i) v[i] = Isa::load(vectors + i * kSumLanes);
  // Every (Rows, Keys) pair up to 16 × 16, the instruction sequence chosen at run time.
  [&]<int... R>(std::integer_sequence<int, R...>) {
    (void)(avx512_lane_sums_by_row_any_keys<R + 1>(std::make_integer_sequence<int, 16>{}, rows, keys, v, scale, out,
                                                   row_stride) ||
           ...);
  }(std::make_integer_sequence<int, 16>{});
}

}  // namespace attnkit::testing
