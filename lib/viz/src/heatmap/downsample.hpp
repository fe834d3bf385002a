// attnkit_viz heatmaps — shrinking a large [n, m] weight matrix to at most `max_cells` cells per axis by
// taking the maximum over blocks, so that a single strong weight stays visible (a mean would fade
// it into its block).
#pragma once

#include <cstdint>
#include <vector>

namespace attnkit::cli {

struct Pooled {
  std::int64_t rows = 0, cols = 0;              // cells after pooling
  std::int64_t block_rows = 1, block_cols = 1;  // queries and keys per cell (the last block may be smaller)
  std::vector<float> cells;                     // [rows, cols] row-major
};

// The block sizes are ceil(n / max_cells) and ceil(m / max_cells): 1 when the axis already fits.
Pooled max_pool(const std::vector<float>& weights, std::int64_t n, std::int64_t m, std::int64_t max_cells);

}  // namespace attnkit::cli
