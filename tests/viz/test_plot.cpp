// Line plots: the figure's size, where points land on linear and log axes, dashes, breaks at
// non-finite points, and one legend for panels that share their series.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "attnkit_viz/plot.hpp"

namespace {

using attnkit::viz::Canvas;
using attnkit::viz::Panel;
using attnkit::viz::Rgb;
using attnkit::viz::Series;

constexpr Rgb kRed{220, 0, 0};
constexpr Rgb kBlue{0, 0, 220};

int count_color(const Canvas& image, Rgb color) {
  int count = 0;
  for (const Rgb& p : image.pixels()) count += p == color;
  return count;
}

// Column of the highest pixel of exactly `color`, and the leftmost and rightmost columns with it.
struct Extent {
  int top_x = -1, left = std::numeric_limits<int>::max(), right = -1;
};
Extent extent(const Canvas& image, Rgb color) {
  Extent e;
  int top = std::numeric_limits<int>::max();
  for (int y = 0; y < image.height(); ++y) {
    for (int x = 0; x < image.width(); ++x) {
      if (image.at(x, y) != color) continue;
      if (y < top) top = y, e.top_x = x;
      e.left = std::min(e.left, x);
      e.right = std::max(e.right, x);
    }
  }
  return e;
}

Panel peak_panel(bool log_x) {
  Panel panel;
  panel.title = "peak";
  panel.log_x = log_x;
  panel.series = {{"", {1, 10, 100}, {0, 1, 0}, kRed, false}};
  return panel;
}

TEST(Plot, FigureSizeIsTheGridOfPanels) {
  const Canvas image = attnkit::viz::plot("t", {peak_panel(false), peak_panel(false), peak_panel(false)}, 2, 300, 200);
  EXPECT_EQ(image.width(), 600);
  EXPECT_GT(image.height(), 400);  // two rows under a title
  EXPECT_LT(image.height(), 480);
}

TEST(Plot, LogXPutsTheMiddleDecadeInTheMiddle) {
  // x = 10 is half-way between 1 and 100 on a log axis, 9/99 of the way on a linear one.
  for (bool log_x : {true, false}) {
    const Canvas image = attnkit::viz::plot("t", {peak_panel(log_x)}, 1, 400, 300);
    const Extent e = extent(image, kRed);
    ASSERT_GT(e.right, e.left);
    const double at = static_cast<double>(e.top_x - e.left) / (e.right - e.left);
    EXPECT_NEAR(at, log_x ? 0.5 : 9.0 / 99.0, 0.03) << (log_x ? "log" : "linear");
  }
}

TEST(Plot, DashedLinesHaveGapsAndNonFinitePointsBreakTheLine) {
  Panel panel;
  panel.series = {{"", {0, 1}, {0, 0}, kRed, false}, {"", {0, 1}, {1, 1}, kBlue, true}};
  const Canvas image = attnkit::viz::plot("t", {panel}, 1, 400, 300);
  const int solid = count_color(image, kRed), dashed = count_color(image, kBlue);
  EXPECT_GT(solid, 100);
  EXPECT_LT(dashed, 0.75 * solid);
  EXPECT_GT(dashed, 0.25 * solid);

  const double nan = std::numeric_limits<double>::quiet_NaN();
  Panel broken;
  broken.series = {{"", {0, 1, 2, 3}, {0, 0, nan, 0}, kRed, false}, {"", {0, 3}, {1, 1}, kBlue, false}};
  const Canvas gap = attnkit::viz::plot("t", {broken}, 1, 400, 300);
  // Only the segment 0–1 and the marker at 3 are drawn: a third of the unbroken line or so.
  EXPECT_LT(count_color(gap, kRed), 0.6 * count_color(gap, kBlue));
}

TEST(Plot, LogAxesSkipNonPositiveValuesAndSharedSeriesGetOneLegend) {
  Panel a;
  a.log_y = true;
  a.series = {{"first", {1, 2, 3}, {1e-3, 0, 1e3}, kRed, false}, {"second", {1, 3}, {1, 1}, kBlue, true}};
  Panel b = a;
  const Canvas shared = attnkit::viz::plot("t", {a, b}, 2, 400, 300);
  b.series[1].name = "other";
  const Canvas separate = attnkit::viz::plot("t", {a, b}, 2, 400, 300);
  // The shared legend sits in one strip under the title; separate legends go inside each panel,
  // so the figure with a shared legend is taller by that strip.
  EXPECT_GT(shared.height(), separate.height());
  EXPECT_GT(count_color(separate, kRed), 0);
}

}  // namespace
