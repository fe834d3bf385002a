// How a validated forward call is cut into work for the fast kernel: work items of
// (batch, KV head, query block), each holding every query head of its GQA group so that each K/V
// block is packed once for the whole group; when decoding, the keys of an item are also split into
// fixed-size ranges whose partial softmax results are merged afterwards.
//
// A packed variable-length batch gets, per sequence, exactly the items and splits a call on that
// sequence alone would get (so its results are bitwise those of that call): only its own query
// blocks, none for padding, and key splits only when that sequence decodes. Threads take items one
// at a time, so a long sequence's many blocks spread over the threads like any other work.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/problem.hpp"
#include "core/softmax_partial.hpp"
#include "cpu/workspace.hpp"

namespace attnkit::cpu {

// One split's partial result for one row (core/softmax_partial.hpp), a view into
// ForwardPlan::partials, where it lies as [max, sum, acc[padded_d_v]].
struct SplitPartial {
  float* max;
  float* sum;
  float* acc;

  // Writes `from`, the first `width` floats of its acc.
  void store(const detail::SoftmaxPartial& from, std::int64_t width) const {
    *max = from.max;
    *sum = from.sum;
    std::copy(from.acc, from.acc + width, acc);
  }
};

struct ForwardPlan {
  const detail::Problem* problem = nullptr;
  const detail::ForwardOutputs* outputs = nullptr;

  std::int64_t group = 1;             // query heads per KV head
  std::int64_t queries_per_item = 1;  // queries of one head in a work item
  std::int64_t query_blocks = 0;      // per (batch, KV head); of the longest sequence when packed
  std::int64_t items = 0;             // batch · KV heads · query blocks, or the packed sequences' sum
  std::int64_t splits = 1;            // key ranges per item (> 1 only when decoding); the most when packed
  // Packed: the first item of each sequence, B + 1 entries (the last is `items`); empty otherwise.
  const std::int64_t* sequence_items = nullptr;
  std::int64_t padded_rows = 0;       // rows of the largest item, in whole register tiles of the target
  std::int64_t padded_d_v = 0;        // d_v rounded up to the target's tile width
  bool short_decode_blocks = false;   // decoding's key blocks and value requests (kernels.hpp)

  // The running target's bf16 rounding of output rows (ForwardKernels::round_to_bf16).
  void (*round_to_bf16)(const float* in, std::uint16_t* out, std::int64_t count) = nullptr;

  // Decode: per (item, split, row) the partial result, a SplitPartial.
  float* partials = nullptr;
  // When probabilities are requested: per (item, row) the final log-sum-exp, for the second pass.
  float* row_lse = nullptr;

  std::int64_t partial_stride() const { return padded_d_v + 2; }
  SplitPartial partial(std::int64_t item, std::int64_t split, std::int64_t row) const {
    float* at = partials + ((item * splits + split) * padded_rows + row) * partial_stride();
    return {.max = at, .sum = at + 1, .acc = at + 2};
  }
};

// Decoding: few queries, many keys. The keys are split so that one query keeps every core busy; the
// split size is fixed, so the result does not depend on the thread count.
inline std::int64_t decode_splits(std::int64_t queries, std::int64_t keys) {
  return queries <= kDecodeQueries && keys > kSplitKeys ? (keys + kSplitKeys - 1) / kSplitKeys : 1;
}

// Where an item's rows come from, and how many key ranges its entry is split into.
struct ItemCoordinates {
  std::int64_t batch = 0, kv_head = 0, first_query = 0, queries = 0, splits = 1;
};

inline ItemCoordinates item_coordinates(const ForwardPlan& plan, std::int64_t item) {
  const detail::Problem& p = *plan.problem;
  const detail::Sizes& s = p.sizes;
  ItemCoordinates c;
  std::int64_t query_blocks = plan.query_blocks, local = item;
  if (plan.sequence_items != nullptr) {
    // The last sequence whose first item is at or before this one (sequences without items share
    // their successor's first item).
    c.batch = std::upper_bound(plan.sequence_items, plan.sequence_items + s.batch + 1, item) - plan.sequence_items - 1;
    local = item - plan.sequence_items[c.batch];
    query_blocks = (p.query_count(c.batch) + plan.queries_per_item - 1) / plan.queries_per_item;
    c.splits = decode_splits(p.query_count(c.batch), p.key_count(c.batch));
  } else {
    c.batch = item / (s.kv_heads * query_blocks);
    c.splits = plan.splits;
  }
  c.kv_head = (local / query_blocks) % s.kv_heads;
  c.first_query = (local % query_blocks) * plan.queries_per_item;
  c.queries = std::min(plan.queries_per_item, p.query_count(c.batch) - c.first_query);
  return c;
}

// The key range [begin, end) of one of an item's splits (split < item.splits).
inline std::int64_t split_begin(const ItemCoordinates& item, std::int64_t split) {
  return item.splits == 1 ? 0 : split * kSplitKeys;
}
inline std::int64_t split_end(const ForwardPlan& plan, const ItemCoordinates& item, std::int64_t split) {
  const std::int64_t m = plan.problem->sizes.m;
  return item.splits == 1 ? m : std::min(m, (split + 1) * kSplitKeys);
}

}  // namespace attnkit::cpu
