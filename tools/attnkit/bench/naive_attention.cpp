// The naive f32 baseline: three passes over a materialised score block.
#include "bench/naive_attention.hpp"
#include "bench/row_softmax.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "bench/thread_team.hpp"

namespace attnkit::bench {

NaiveAttention::NaiveAttention(const AttentionShape& shape, int threads, std::int64_t rows_per_block)
    : shape_(shape), threads_(threads), blocks_(shape, rows_per_block) {
  const auto scratch = static_cast<std::size_t>(blocks_.rows_per_block() * shape.m);
  for (int t = 0; t < threads; ++t) scores_.emplace_back(scratch, 0.0f);  // zero-filled: every page touched
}

void NaiveAttention::run(const float* q, const float* k, const float* v, float* out) {
  for_each_task(threads_, blocks_.count(), [&](int thread, std::int64_t task) {
    run_block(blocks_[task], q, k, v, out, scores_[static_cast<std::size_t>(thread)].data());
  });
}

void NaiveAttention::run_block(const RowBlock& block, const float* q, const float* k, const float* v, float* out,
                               float* scores) const {
  const AttentionShape& s = shape_;
  const float* q_head = q + s.q_offset(block.batch, block.head);
  const float* k_head = k + s.k_offset(block.batch, block.head);
  const float* v_head = v + s.v_offset(block.batch, block.head);
  float* out_head = out + s.out_offset(block.batch, block.head);
  const float scale = s.scale();

  for (std::int64_t i = block.row_begin; i < block.row_end; ++i) {
    float* row = scores + (i - block.row_begin) * s.m;  // [m], of which the first `visible` are used
    const std::int64_t visible = s.visible_keys(i);
    const float* qi = q_head + i * s.d_k;

    // 1. scores: row[j] = (q_i · k_j) · scale
    for (std::int64_t j = 0; j < visible; ++j) {
      const float* kj = k_head + j * s.d_k;
      float dot = 0.0f;
      for (std::int64_t c = 0; c < s.d_k; ++c) dot += qi[c] * kj[c];
      row[j] = dot * scale;
    }

    // 2. softmax over the visible keys: subtract the row max so exp never overflows
    softmax_row(row, visible, visible);

    // 3. out_i = Σ_j p_ij · v_j
    float* oi = out_head + i * s.d_v;
    for (std::int64_t c = 0; c < s.d_v; ++c) oi[c] = 0.0f;
    for (std::int64_t j = 0; j < visible; ++j) {
      const float p = row[j];
      const float* vj = v_head + j * s.d_v;
      for (std::int64_t c = 0; c < s.d_v; ++c) oi[c] += p * vj[c];
    }
  }
}

}  // namespace attnkit::bench
