// attnkit_viz — the colour map of heatmaps: perceptually uniform (equal steps of the value look
// like equal steps of colour, and lightness rises monotonically, so it also reads in grey), from
// dark blue-purple at 0 to yellow at 1, like matplotlib's viridis.
#pragma once

#include "attnkit_viz/canvas.hpp"

namespace attnkit::viz {

Rgb colormap(double t);  // t is clamped to [0, 1]; NaN gives grey

}  // namespace attnkit::viz
