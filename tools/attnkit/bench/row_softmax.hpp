// The row softmax both f32 baselines use, written as a user would: max, exp, sum, normalise.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace attnkit::bench {

// Turns row i of `scores` (`keys` wide) into softmax weights over its visible keys, in place; keys
// past the visible ones (causal) get weight 0 so that the second sgemm can run over the whole block.
inline void softmax_row(float* row, std::int64_t visible, std::int64_t keys) {
  float row_max = -std::numeric_limits<float>::infinity();
  for (std::int64_t j = 0; j < visible; ++j) row_max = std::max(row_max, row[j]);
  float sum = 0.0f;
  for (std::int64_t j = 0; j < visible; ++j) {
    row[j] = std::exp(row[j] - row_max);
    sum += row[j];
  }
  const float inv_sum = visible > 0 ? 1.0f / sum : 0.0f;  // a row with no visible key gives 0
  for (std::int64_t j = 0; j < visible; ++j) row[j] *= inv_sum;
  std::fill(row + visible, row + keys, 0.0f);
}

}  // namespace attnkit::bench
