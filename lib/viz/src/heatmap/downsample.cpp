// Max pooling of attention weight matrices for `attnkit heatmap`.
#include "downsample.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

namespace attnkit::cli {

namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

}  // namespace

Pooled max_pool(const std::vector<float>& weights, std::int64_t n, std::int64_t m, std::int64_t max_cells) {
  Pooled p;
  max_cells = std::max<std::int64_t>(1, max_cells);
  p.block_rows = std::max<std::int64_t>(1, ceil_div(n, max_cells));
  p.block_cols = std::max<std::int64_t>(1, ceil_div(m, max_cells));
  p.rows = ceil_div(n, p.block_rows);
  p.cols = ceil_div(m, p.block_cols);
  p.cells.assign(static_cast<std::size_t>(p.rows * p.cols), -std::numeric_limits<float>::infinity());
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t j = 0; j < m; ++j) {
      float& cell = p.cells[static_cast<std::size_t>((i / p.block_rows) * p.cols + j / p.block_cols)];
      const float w = weights[static_cast<std::size_t>(i * m + j)];
      // A NaN in a block makes the block NaN (drawn grey) rather than vanishing in the maximum.
      if (std::isnan(w) || std::isnan(cell)) {
        cell = std::numeric_limits<float>::quiet_NaN();
      } else {
        cell = std::max(cell, w);
      }
    }
  }
  return p;
}

}  // namespace attnkit::cli
