// What one (query chunk, key chunk) pair computes: nothing, everything, or the causal diagonal.
// Chunks are ranges of a partition of the global sequence, so two chunks are either the same range
// or disjoint; under causal masking a disjoint pair is fully visible or fully masked.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "dist/problem.hpp"

namespace attnkit::dist::detail {

// The options of the block call for queries `qc` against keys `kc`, or nullopt when no query of
// qc sees any key of kc (the pair is skipped and costs nothing). `key_lengths` is storage for the
// block's local key lengths; keep it alive while the options are used.
inline std::optional<AttentionOptions> block_options(const RingProblem& p, const Chunk& qc, const Chunk& kc,
                                                     std::vector<std::int64_t>& key_lengths) {
  if (qc.length == 0 || kc.length == 0) return std::nullopt;
  AttentionOptions o;
  o.scale = p.scale;
  o.softcap = p.softcap;
  o.kernel = Kernel::fast;
  if (p.causal) {
    if (kc.global_start >= qc.global_start + qc.length) return std::nullopt;  // every key after every query
    if (kc.global_start == qc.global_start) {
      o.causal = Causal::top_left;  // the same chunk: local j <= i is global j <= i
    }
    // else kc ends before qc starts (disjoint and not after it): fully visible.
  }
  if (!p.key_lengths.empty()) {
    // Global padding from key_lengths[b] on, seen from the block's first key.
    key_lengths.resize(p.key_lengths.size());
    bool any = false;
    for (std::size_t b = 0; b < key_lengths.size(); ++b) {
      key_lengths[b] = std::clamp<std::int64_t>(p.key_lengths[b] - kc.global_start, 0, kc.length);
      any = any || key_lengths[b] > 0;
    }
    if (!any) return std::nullopt;  // the whole block is padding in every batch entry
    o.key_lengths = key_lengths;
  }
  return o;
}

}  // namespace attnkit::dist::detail
