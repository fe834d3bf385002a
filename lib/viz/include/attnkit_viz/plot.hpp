// attnkit_viz — line plots for the lab: one or more panels of lines, with axes, ticks, a legend.
#pragma once

#include <limits>
#include <string>
#include <vector>

#include "attnkit_viz/canvas.hpp"

namespace attnkit::viz {

struct Series {
  std::string name;            // in the legend
  std::vector<double> x, y;    // same length; non-finite points break the line
  Rgb color = kBlack;
  bool dashed = false;
};

struct Panel {
  std::string title, x_label, y_label;
  bool log_x = false, log_y = false;  // base-10 (log_x of d_k ticks at 2, 4, ..., as given by x_ticks)
  std::vector<double> x_ticks;        // empty: chosen automatically
  // The y data range to show (padded like data); NaN: from the series. Panels that are compared
  // side by side share one this way.
  double y_min = std::numeric_limits<double>::quiet_NaN(), y_max = std::numeric_limits<double>::quiet_NaN();
  std::vector<Series> series;
};

// Panels laid out in a grid of `columns`, each panel_width × panel_height pixels, with a title
// over the whole figure. Each panel gets a legend of its named series in the corner its lines cross
// least; when every panel has the same named series, one legend under the title serves them all.
Canvas plot(const std::string& title, const std::vector<Panel>& panels, int columns = 2, int panel_width = 520,
           int panel_height = 380);

}  // namespace attnkit::viz
