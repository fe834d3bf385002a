// attnkit_viz heatmaps — what a figure or page draws: one [n, m] matrix of attention weights per panel.
#pragma once

#include <cstdint>
#include <vector>

namespace attnkit::cli {

struct HeadWeights {
  std::int64_t n = 0, m = 0;                 // queries (rows) and keys (columns)
  std::vector<std::int64_t> heads;           // the head number of each panel
  std::vector<std::vector<float>> weights;   // per panel, [n, m] row-major
};

}  // namespace attnkit::cli
