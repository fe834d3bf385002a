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

// The problem of queries `qc` (rows of q) against keys `kc` (rows of k and v), or nullopt when no
// query of qc sees any key of kc (the pair is skipped and costs nothing). It is the call's resolved
// problem (RingProblem::resolved) over the block's views, with the block's own causal alignment and
// key lengths: straight to the kernel, since the call was validated once and the blocks are this
// call's own float32 buffers. `key_lengths` is storage for the block's local key lengths; keep it
// alive while the problem is used.
inline std::optional<attnkit::detail::Problem> block_problem(const RingProblem& p, const Chunk& qc, const Chunk& kc,
                                                             ConstTensorView q, ConstTensorView k, ConstTensorView v,
                                                             std::vector<std::int64_t>& key_lengths) {
  if (qc.length == 0 || kc.length == 0) return std::nullopt;
  attnkit::detail::Problem block = p.resolved;
  if (p.resolved.causal != Causal::none) {
    if (kc.global_start >= qc.global_start + qc.length) return std::nullopt;  // every key after every query
    // The same chunk: local j <= i is global j <= i. Otherwise kc ends before qc starts (disjoint and
    // not after it): fully visible.
    block.causal = kc.global_start == qc.global_start ? Causal::top_left : Causal::none;
  }
  if (!p.resolved.key_lengths.empty()) {
    // Global padding from key_lengths[b] on, seen from the block's first key.
    key_lengths.resize(p.resolved.key_lengths.size());
    bool any = false;
    for (std::size_t b = 0; b < key_lengths.size(); ++b) {
      key_lengths[b] = std::clamp<std::int64_t>(p.resolved.key_lengths[b] - kc.global_start, 0, kc.length);
      any = any || key_lengths[b] > 0;
    }
    if (!any) return std::nullopt;  // the whole block is padding in every batch entry
    block.key_lengths = key_lengths;
  }
  block.q = q;
  block.k = k;
  block.v = v;
  block.sizes = {q.size(0), q.size(1), k.size(1), q.size(2), k.size(2), q.size(3), v.size(3)};
  return block;
}

}  // namespace attnkit::dist::detail
