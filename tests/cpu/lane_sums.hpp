// The avx512 target's sums across lanes, compiled in their own translation unit with AVX-512 flags
// (lane_sums_avx512.cpp: call only on CPUs with AVX-512F).
#pragma once

namespace attnkit::testing {

inline constexpr int kSumLanes = 16;

// For count (1 to 16) vectors of kSumLanes floats: tree[i] by the reduction tree over all of them
// (Avx512Isa::reduce_add_each), one_by_one[i] by reduce_add on vector i alone.
void avx512_lane_sums(const float* vectors, int count, float* tree, float* one_by_one);

// For rows · keys <= 16 vectors (rows and keys 1 to 16): out[r·row_stride + t] = scale · (the sum of
// vector t·rows + r) by Avx512Isa::reduce_add_each_by_row, which writes nothing else.
void avx512_lane_sums_by_row(const float* vectors, int rows, int keys, float scale, float* out, int row_stride);

}  // namespace attnkit::testing
