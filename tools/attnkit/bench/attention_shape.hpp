// The problem the benchmark's baselines solve, and how they cut it into tasks for threads.
//
// Inputs are contiguous f32 in the library's logical order:
//   q [batch, heads, n, d_k]   k [batch, kv_heads, m, d_k]   v [batch, kv_heads, m, d_v]
//   out [batch, heads, n, d_v]
// Query head h reads KV head h / (heads / kv_heads) (GQA), scale = 1/√d_k, and `causal` is
// attnkit's Causal::top_left: query i sees keys j <= i.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace attnkit::bench {

struct AttentionShape {
  std::int64_t batch = 1;
  std::int64_t heads = 1;
  std::int64_t kv_heads = 1;
  std::int64_t n = 0;  // queries
  std::int64_t m = 0;  // keys
  std::int64_t d_k = 0;
  std::int64_t d_v = 0;
  bool causal = false;

  std::int64_t visible_keys(std::int64_t query) const { return causal ? std::min(query + 1, m) : m; }
  float scale() const { return 1.0f / std::sqrt(static_cast<float>(d_k)); }
  std::int64_t kv_head_of(std::int64_t head) const { return head / (heads / kv_heads); }

  // Element offsets of row 0 of a (batch, head) slice in each tensor.
  std::int64_t q_offset(std::int64_t b, std::int64_t h) const { return (b * heads + h) * n * d_k; }
  std::int64_t k_offset(std::int64_t b, std::int64_t h) const { return (b * kv_heads + kv_head_of(h)) * m * d_k; }
  std::int64_t v_offset(std::int64_t b, std::int64_t h) const { return (b * kv_heads + kv_head_of(h)) * m * d_v; }
  std::int64_t out_offset(std::int64_t b, std::int64_t h) const { return (b * heads + h) * n * d_v; }
};

// Rows [row_begin, row_end) of one (batch, head): the unit of work a thread takes.
struct RowBlock {
  std::int64_t batch, head, row_begin, row_end;
  std::int64_t rows() const { return row_end - row_begin; }
};

// Every head's rows cut into blocks of at most `rows_per_block`, numbered 0..count()-1.
class RowBlocks {
 public:
  RowBlocks(const AttentionShape& shape, std::int64_t rows_per_block)
      : shape_(shape), rows_per_block_(std::max<std::int64_t>(rows_per_block, 1)),
        blocks_per_head_((shape.n + rows_per_block_ - 1) / rows_per_block_) {}

  std::int64_t count() const { return shape_.batch * shape_.heads * blocks_per_head_; }
  std::int64_t rows_per_block() const { return rows_per_block_; }

  RowBlock operator[](std::int64_t index) const {
    const std::int64_t slice = index / blocks_per_head_;  // batch * heads + head
    const std::int64_t begin = (index % blocks_per_head_) * rows_per_block_;
    return {slice / shape_.heads, slice % shape_.heads, begin, std::min(begin + rows_per_block_, shape_.n)};
  }

 private:
  AttentionShape shape_;
  std::int64_t rows_per_block_;
  std::int64_t blocks_per_head_;
};

}  // namespace attnkit::bench
