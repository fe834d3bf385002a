// The one function that merges partial softmax results. Split-key decoding uses it here; ring
// attention over MPI will use it too, so the formula is written and tested once.
#pragma once

#include <cmath>
#include <cstdint>

namespace attnkit::cpu {

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

}  // namespace attnkit::cpu
