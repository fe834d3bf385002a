// The naive f32 baseline: attention as a user writes it first, in plain loops. For each block of
// query rows it materialises the scores (rows × m), applies a row softmax with std::exp, then
// multiplies by V. No SIMD intrinsics, no tiling, no online softmax: the compiler vectorises what it
// can on its own. The accuracy rule of docs/semantics.md is stated against a kernel like this one.
//
// Masked keys (causal) are skipped, not computed and discarded, so its FLOP count matches the one
// the report divides by.
#pragma once

#include <cstdint>
#include <vector>

#include "bench/attention_shape.hpp"

namespace attnkit::bench {

class NaiveAttention {
 public:
  // Rows per task: small, so that causal rows (whose cost grows with the row index) balance over
  // threads; the scores of a block are one contiguous rows × m matrix.
  static constexpr std::int64_t kRowsPerBlock = 32;

  // Allocates and touches each thread's score matrix, so that run() allocates nothing.
  NaiveAttention(const AttentionShape& shape, int threads, std::int64_t rows_per_block = kRowsPerBlock);

  // out = softmax(q·kᵀ·scale)·v, blocks of rows spread over the threads. Layouts: attention_shape.hpp.
  void run(const float* q, const float* k, const float* v, float* out);

 private:
  void run_block(const RowBlock& block, const float* q, const float* k, const float* v, float* out,
                 float* scores) const;

  AttentionShape shape_;
  int threads_;
  RowBlocks blocks_;
  std::vector<std::vector<float>> scores_;  // per thread: rows_per_block × m
};

}  // namespace attnkit::bench
