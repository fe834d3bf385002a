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
  std::int64_t head = 0;     // query head
  std::int64_t query = 0;    // query index i
  std::int64_t first = 0;    // first visible key (inclusive)
  std::int64_t last = -1;    // last visible key (inclusive); last < first: no visible key
  float alibi_slope = 0.0f;
};

// The aligned query position is i + causal_shift (shared/DESIGN.md: bottom-right aligns the last
// query with the last key).
inline std::int64_t causal_shift(const detail::Problem& p) {
  return p.options->causal == Causal::bottom_right ? p.sizes.m - p.sizes.n : 0;
}

inline RowInfo make_row_info(const detail::Problem& p, std::int64_t batch, std::int64_t head, std::int64_t query) {
  const AttentionOptions& o = *p.options;
  RowInfo info;
  info.head = head;
  info.query = query;
  const std::int64_t pos = query + causal_shift(p);
  info.first = 0;
  info.last = p.sizes.m - 1;
  if (o.causal != Causal::none) info.last = std::min(info.last, pos);
  if (o.window.left >= 0) info.first = std::max(info.first, pos - o.window.left);
  if (o.window.right >= 0) info.last = std::min(info.last, pos + o.window.right);
  if (!o.key_lengths.empty()) info.last = std::min(info.last, o.key_lengths[static_cast<std::size_t>(batch)] - 1);
  info.alibi_slope = o.alibi_slopes.empty() ? 0.0f : o.alibi_slopes[static_cast<std::size_t>(head)];
  return info;
}

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

}  // namespace attnkit::cpu
