// attnkit_viz heatmaps — the picture: one heatmap panel per head in a grid (row = query, column = key),
// the head number over each panel, token labels (or positions) on the axes, a colour bar, a title,
// and notes that say what the colours mean and how a large matrix was downsampled.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attnkit_viz/canvas.hpp"
#include "attnkit_viz/heatmap/head_weights.hpp"

namespace attnkit::cli {

inline constexpr std::int64_t kDefaultMaxCells = 200;  // cells per axis per panel before max pooling
inline constexpr int kDefaultPanelSide = 400;            // pixels, when the cells allow

struct HeatmapFigure {
  std::string title;
  std::string source;                                 // first note line, e.g. "probs.npy, batch 0"
  std::vector<std::string> query_tokens, key_tokens;  // n and m labels; empty: positions 0, 1, ...
  HeadWeights weights;
  std::vector<std::string> head_names;                // optional, per panel: "head 3: <name>"
  std::optional<double> vmax;                         // top of the colour scale; default: largest weight
  std::string vmax_source = "--vmax";                 // where a given vmax came from, for the notes
  std::int64_t max_cells = kDefaultMaxCells;

  // Small multiples (the head viewer's layer x head grid). Each is optional; the defaults give
  // `attnkit heatmap`'s figure.
  int columns = 0;                                  // panels per grid row; 0: about square
  std::vector<std::string> panel_titles;            // per panel, replacing "head N: name"
  std::vector<std::vector<std::string>> captions;   // per panel, lines between its title and heatmap
  int panel_side = kDefaultPanelSide;               // the longer side of a panel's heatmap, in pixels
  bool outer_labels_only = false;                   // token labels on the left column and bottom panels only
};

struct Rect {
  int x = 0, y = 0, w = 0, h = 0;
};

// Where everything goes. It depends on the sizes, the number of heads, the labels and max_cells,
// not on the text of the title or the source (each is one line, shortened to fit).
struct FigureLayout {
  int width = 0, height = 0;
  std::int64_t rows = 0, cols = 0;              // cells per panel after pooling
  std::int64_t block_rows = 1, block_cols = 1;  // queries and keys per cell
  int cell_w = 0, cell_h = 0;                   // pixels per cell
  int columns = 1;                              // panels per grid row
  std::vector<Rect> panels;                     // each head's heatmap (cells only), in head order
  Rect colorbar;                                // the gradient, top = vmax, bottom = 0
  double vmax = 1.0;
};

FigureLayout layout_figure(const HeatmapFigure& figure);
// Raises Error(invalid_shape) when there is nothing to draw (no head, n = 0 or m = 0).
viz::Canvas render_figure(const HeatmapFigure& figure);

}  // namespace attnkit::cli
