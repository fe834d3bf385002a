// Which keys a query row sees: causal alignment, sliding window and key lengths reduce to one
// interval [first, last] of key positions per row (masks and biases are applied per element later).
// Target-independent; shared by the forward and backward kernels.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/problem.hpp"

namespace attnkit::cpu {

// What one row of a work item is: which query, and which keys it may see.
struct RowInfo {
  std::int64_t head = 0;      // query head
  std::int64_t query = 0;     // query index i
  std::int64_t position = 0;  // aligned query position i' (docs/semantics.md), for the window and ALiBi
  std::int64_t first = 0;    // first visible key (inclusive)
  std::int64_t last = -1;    // last visible key (inclusive); last < first: no visible key
  float alibi_slope = 0.0f;
};

// The row's aligned position and visible interval, as the problem defines them (core/problem.hpp).
inline RowInfo make_row_info(const detail::Problem& p, std::int64_t batch, std::int64_t head, std::int64_t query) {
  const detail::Problem::VisibleKeys keys = p.visible_keys(batch, query);
  RowInfo info;
  info.head = head;
  info.query = query;
  info.position = keys.position;
  info.first = keys.first;
  info.last = keys.last;
  info.alibi_slope = p.alibi_slope(head);
  return info;
}

// Where key (and value) row j and query row i of batch entry b are stored (core/problem.hpp).
using detail::query_row;
using detail::stored_row;
using detail::StoredRow;

struct KeyRange {
  std::int64_t begin, end;  // the keys [begin, end) a work item covers
};

// The keys a row can see, clipped to the range.
inline std::int64_t first_seen(const RowInfo& info, KeyRange keys) { return std::max(info.first, keys.begin); }
inline std::int64_t last_seen(const RowInfo& info, KeyRange keys) { return std::min(info.last, keys.end - 1); }

inline bool row_sees_block(const RowInfo& info, KeyRange keys, std::int64_t j0, std::int64_t width) {
  const std::int64_t first = first_seen(info, keys), last = last_seen(info, keys);
  return first <= last && first < j0 + width && last >= j0;
}

// How far into the block of keys j0 .. j0 + width the `count` rows see: one past the last key any of
// them sees, counted from j0; 0 when none sees the block. A tile's columns past it need no work (on
// the causal diagonal, about half the block).
inline std::int64_t seen_width(const RowInfo* rows, std::int64_t count, KeyRange keys, std::int64_t j0,
                               std::int64_t width) {
  std::int64_t last = -1;
  for (std::int64_t r = 0; r < count; ++r) {
    if (row_sees_block(rows[r], keys, j0, width)) last = std::max(last, std::min(last_seen(rows[r], keys), j0 + width - 1) - j0);
  }
  return last + 1;
}

}  // namespace attnkit::cpu
