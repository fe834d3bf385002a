// Softmax partials: a softmax over a set of keys kept unnormalised, so that the results over
// disjoint key sets can be merged (split-key decoding, ring attention) and then normalised once.
// Written and tested once (tests/core/test_softmax_partial.cpp), NaN, ±inf and empty sets included.
#pragma once

#include <cmath>
#include <cstdint>

namespace attnkit::detail {

// A partial result over a set of keys: max = max_j s_j, sum = Σ_j e^(s_j − max),
// acc = Σ_j e^(s_j − max) · v_j. An empty set is (−inf, 0, 0).
// merge(a, b) over disjoint key sets: with m = max(a.max, b.max),
//   sum = a.sum · e^(a.max − m) + b.sum · e^(b.max − m),  acc likewise,  max = m.
inline void merge_softmax_partial(float& max, float& sum, float* acc, float other_max, float other_sum,
                                  const float* other_acc, std::int64_t width) {
  const float merged = std::isnan(max) || std::isnan(other_max) ? NAN : std::fmax(max, other_max);
  if (merged == -INFINITY) return;  // both empty
  const float keep = std::exp(max - merged), take = std::exp(other_max - merged);  // 0 for an empty side
  sum = sum * keep + other_sum * take;
  for (std::int64_t c = 0; c < width; ++c) acc[c] = acc[c] * keep + other_acc[c] * take;
  max = merged;
}

// Normalises a partial in place, acc ← acc / sum, and returns its log-sum-exp, max + log(sum). The
// empty set (sum = 0: no visible key) gives zeros, never 0/0, and −inf. A NaN max or sum propagates.
inline float finalize_softmax_partial(float max, float sum, float* acc, std::int64_t width) {
  if (sum == 0) {
    for (std::int64_t c = 0; c < width; ++c) acc[c] = 0.0f;
    return -INFINITY;
  }
  const float inv = 1.0f / sum;
  for (std::int64_t c = 0; c < width; ++c) acc[c] *= inv;
  return max + std::log(sum);
}

}  // namespace attnkit::detail
