// How a validated forward call is cut into work for the fast kernel: work items of
// (batch, KV head, query block), each holding every query head of its GQA group so that each K/V
// block is packed once for the whole group; when decoding, the keys of an item are also split into
// fixed-size ranges whose partial softmax results are merged afterwards.
#pragma once

#include <cstdint>
#include <vector>

#include "core/problem.hpp"
#include "cpu/workspace.hpp"

namespace attnkit::cpu {

struct ForwardPlan {
  const detail::Problem* problem = nullptr;
  const detail::ForwardOutputs* outputs = nullptr;

  std::int64_t group = 1;             // query heads per KV head
  std::int64_t queries_per_item = 1;  // queries of one head in a work item
  std::int64_t query_blocks = 0;      // per (batch, KV head)
  std::int64_t items = 0;             // batch · KV heads · query blocks
  std::int64_t splits = 1;            // key ranges per item (> 1 only when decoding)
  std::int64_t padded_rows = 0;       // rows of the largest item, in whole register tiles of the target
  std::int64_t padded_d_v = 0;        // d_v rounded up to the target's tile width

  // Decode: per (item, split, row) the partial result [max, sum, acc[padded_d_v]].
  float* partials = nullptr;
  // When probabilities are requested: per (item, row) the final log-sum-exp, for the second pass.
  float* row_lse = nullptr;

  std::int64_t partial_stride() const { return padded_d_v + 2; }
  float* partial(std::int64_t item, std::int64_t split, std::int64_t row) const {
    return partials + ((item * splits + split) * padded_rows + row) * partial_stride();
  }
};

// Where an item's rows come from.
struct ItemCoordinates {
  std::int64_t batch = 0, kv_head = 0, first_query = 0, queries = 0;
};

inline ItemCoordinates item_coordinates(const ForwardPlan& plan, std::int64_t item) {
  const detail::Sizes& s = plan.problem->sizes;
  ItemCoordinates c;
  c.batch = item / (s.kv_heads * plan.query_blocks);
  c.kv_head = (item / plan.query_blocks) % s.kv_heads;
  c.first_query = (item % plan.query_blocks) * plan.queries_per_item;
  c.queries = std::min(plan.queries_per_item, s.n - c.first_query);
  return c;
}

// The key range [begin, end) of a split.
inline std::int64_t split_begin(const ForwardPlan& plan, std::int64_t split) {
  return plan.splits == 1 ? 0 : split * kSplitKeys;
}
inline std::int64_t split_end(const ForwardPlan& plan, std::int64_t split) {
  return plan.splits == 1 ? plan.problem->sizes.m : std::min(plan.problem->sizes.m, (split + 1) * kSplitKeys);
}

}  // namespace attnkit::cpu
