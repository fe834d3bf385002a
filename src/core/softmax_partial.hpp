// Softmax partials: a softmax over a set of keys kept unnormalised, so that the results over
// disjoint key sets can be merged and then normalised once. One rule, written and tested once
// (tests/core/test_softmax_partial.cpp), NaN, ±inf and empty sets included, for every user: the
// streaming kernels' per-block rescale (merged_max, rescale_exponent), split-key decoding and ring
// attention (merge, finalize).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace attnkit::detail {

// The partial over a set of keys: max = max_j s_j, sum = Σ_j e^(s_j − max) and
// acc = Σ_j e^(s_j − max) · v_j, whose width floats live in the owner's storage (a workspace row, a
// ring buffer's row). An empty set is (−inf, 0, zeros).
struct SoftmaxPartial {
  float max = -INFINITY;
  float sum = 0;
  float* acc = nullptr;

  // The max over both sets: NaN when either is NaN (a NaN score poisons its row), else the larger.
  static float merged_max(float a, float b) { return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); }

  // The exponent that carries a partial from its max `from` to the merged max `to`: from − to <= 0
  // (−inf for an empty partial beside a non-empty one, so its factor is 0), and 0 when both are −inf
  // (nothing seen yet: nothing changes). The streaming kernels take the exp of these in vectors.
  static float rescale_exponent(float from, float to) { return to == -INFINITY ? 0.0f : from - to; }

  // Merges the partial (other_max, other_sum, other_acc) of a disjoint key set into this one: with
  // m = merged_max, sum = sum · e^(max − m) + other_sum · e^(other_max − m), acc likewise, max = m.
  //
  // `headroom` h >= 0 is added to other_max: a partial built from empty by merging every part with
  // the same h keeps its reference point h above the parts' largest max, so its sum and acc are
  // e^(−h) times their plain values and mean the same (sum · e^max is unchanged). With h at least
  // log(keys · largest weight) (headroom_for), acc = Σ p·v cannot overflow while every |v| is
  // finite: split-key merges that overflowed are redone that way, and ring attention folds with it.
  void merge(float other_max, float other_sum, const float* other_acc, std::int64_t width, float headroom = 0) {
    const float merged = merged_max(max, other_max == -INFINITY ? other_max : other_max + headroom);
    if (merged == -INFINITY) return;  // both empty
    const float keep = std::exp(rescale_exponent(max, merged)), take = std::exp(rescale_exponent(other_max, merged));
    sum = sum * keep + other_sum * take;
    for (std::int64_t c = 0; c < width; ++c) acc[c] = acc[c] * keep + other_acc[c] * take;
    max = merged;
  }

  // The headroom that keeps acc = Σ_j w_j e^(s_j − max) v_j finite for `keys` keys of weight w_j at
  // most `largest_weight` (dropout's 1/(1 − p)): log(keys · largest_weight) + 1 makes Σ w e^(s − max)
  // at most 1/e, so |acc| < max |v|. Weights that fall below float's range then were below 2^-100
  // of the largest anyway.
  static float headroom_for(std::int64_t keys, float largest_weight) {
    return static_cast<float>(std::log(static_cast<double>(std::max<std::int64_t>(keys, 1)) * largest_weight) + 1.0);
  }

  // Adds a sink: one more logit, `sink`, whose value row is zero, so that it joins the sum and not
  // acc. The max moves to the larger of the two; a partial with no keys becomes (sink, 1, zeros),
  // whose finalize gives zeros and the sink as its log-sum-exp. A NaN max stays NaN.
  void add_sink(float sink, std::int64_t width) {
    const float merged = merged_max(max, sink);
    if (merged == -INFINITY) return;  // no keys and a −inf sink
    const float keep = std::exp(rescale_exponent(max, merged));
    sum = sum * keep + std::exp(sink - merged);
    for (std::int64_t c = 0; c < width; ++c) acc[c] *= keep;
    max = merged;
  }

  // Normalises acc in place, acc ← acc / sum, and returns the log-sum-exp, max + log(sum). The empty
  // set (sum = 0: no visible key) gives zeros, never 0/0, and −inf. A NaN max or sum propagates.
  float finalize(std::int64_t width) {
    if (sum == 0) {
      for (std::int64_t c = 0; c < width; ++c) acc[c] = 0.0f;
      return -INFINITY;
    }
    const float inv = 1.0f / sum;
    for (std::int64_t c = 0; c < width; ++c) acc[c] *= inv;
    return max + std::log(sum);
  }
};

}  // namespace attnkit::detail
