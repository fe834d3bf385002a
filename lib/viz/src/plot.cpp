// Line plots for the lab: each panel maps its data to a plot area (linear or base-10 log axes,
// padded so no point sits on the frame), draws grid lines at the ticks, the series as
// anti-aliased lines with a marker per point, the frame, tick labels, axis labels and a legend
// placed in the corner its lines cross least. When every panel has the same series, one legend
// under the figure's title serves them all.
#include "attnkit_viz/plot.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <tuple>

#include "attnkit_viz/text.hpp"

namespace attnkit::viz {

namespace {

constexpr int kTitleSize = 20, kPanelTitleSize = 15, kLabelSize = 13, kTickSize = 12, kLegendSize = 13;
constexpr Rgb kTextColor{30, 30, 30}, kAxisColor{70, 70, 70}, kGridColor{230, 230, 230}, kLegendEdge{200, 200, 200};
constexpr double kLineWidth = 2.0;
constexpr double kDash = 7.0;          // dash and gap length of dashed series, in pixels
constexpr double kMarkerRadius = 3.0;
constexpr double kPadFraction = 0.05;  // of the data span, on each side of an axis
constexpr int kTargetTicks = 6;        // a linear axis gets at most about this many ticks
constexpr int kMaxDecadeLabels = 7;    // a log axis labels every k-th decade beyond this
constexpr int kTickLength = 4;
constexpr int kLegendSample = 28;      // length of the line drawn before a legend entry
constexpr int kLegendRow = 20;
constexpr int kMargin = 8;

bool usable(double v, bool log) { return std::isfinite(v) && (!log || v > 0); }

// One axis: its range in axis space (log10 of the value for a log axis), its ticks and labels.
struct Axis {
  bool log = false;
  double lo = 0, hi = 1;
  std::vector<double> ticks;  // data values
  std::vector<std::string> labels;

  double to_axis(double v) const { return log ? std::log10(v) : v; }
  double fraction(double v) const { return (to_axis(v) - lo) / (hi - lo); }
};

std::string format(const char* spec, double value) {
  char buffer[48];
  std::snprintf(buffer, sizeof buffer, spec, value);
  return buffer;
}

// "10⁻¹⁶": the exponent in Unicode superscript digits.
std::string power_of_ten(int exponent) {
  static const char* const kDigits[] = {"⁰", "¹", "²", "³", "⁴", "⁵", "⁶", "⁷", "⁸", "⁹"};
  std::string text = "10";
  if (exponent < 0) text += "⁻";
  const std::string digits = std::to_string(std::abs(exponent));
  for (char d : digits) text += kDigits[d - '0'];
  return text;
}

// The smallest of 1, 2, 5 × 10^k that is at least `raw`.
double nice_step(double raw) {
  const double decade = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * decade >= raw * (1 - 1e-9)) return m * decade;
  }
  return 10 * decade;
}

void linear_ticks(Axis& axis) {
  const double step = nice_step((axis.hi - axis.lo) / kTargetTicks);
  const int decimals = std::max(0, -static_cast<int>(std::floor(std::log10(step) + 1e-9)));
  for (double k = std::ceil(axis.lo / step); k * step <= axis.hi; k += 1) {
    const double t = std::abs(k) < 0.5 ? 0.0 : k * step;  // no "-0"
    axis.ticks.push_back(t);
    char label[48];
    std::snprintf(label, sizeof label, "%.*f", decimals, t);
    axis.labels.push_back(label);
  }
}

void log_ticks(Axis& axis) {
  const int first = static_cast<int>(std::ceil(axis.lo - 1e-9)), last = static_cast<int>(std::floor(axis.hi + 1e-9));
  const bool plain = first >= -2 && last <= 4;  // 0.01 .. 10000 read better as plain numbers
  const int count = last - first + 1;
  const int stride = count > kMaxDecadeLabels ? (count + kMaxDecadeLabels - 1) / kMaxDecadeLabels : 1;
  for (int e = first; e <= last; ++e) {
    if (e % stride != 0) continue;
    axis.ticks.push_back(std::pow(10.0, e));
    axis.labels.push_back(plain ? format("%g", std::pow(10.0, e)) : power_of_ten(e));
  }
  if (count < 2) {  // less than a decade in view: add 2 and 5 times the decades around it
    for (int e = first - 1; e <= last; ++e) {
      for (double m : {2.0, 5.0}) {
        const double v = m * std::pow(10.0, e);
        if (std::log10(v) >= axis.lo && std::log10(v) <= axis.hi) {
          axis.ticks.push_back(v);
          axis.labels.push_back(format("%g", v));
        }
      }
    }
  }
}

// The axis over `values` (the usable ones), padded; `given` ticks are used as they are.
Axis make_axis(const std::vector<double>& values, bool log, const std::vector<double>& given) {
  Axis axis;
  axis.log = log;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (double v : values) {
    if (!usable(v, log)) continue;
    lo = std::min(lo, axis.to_axis(v));
    hi = std::max(hi, axis.to_axis(v));
  }
  if (!(lo <= hi)) lo = 0, hi = 1;  // nothing to show: an empty unit range
  if (hi - lo < 1e-12 * std::max(1.0, std::abs(lo))) {
    const double half = log ? 0.5 : std::max(std::abs(lo) * 0.1, 0.5);
    lo -= half, hi += half;
  }
  const double pad = (hi - lo) * kPadFraction;
  axis.lo = lo - pad, axis.hi = hi + pad;
  if (!given.empty()) {
    for (double t : given) {
      if (!usable(t, log) || axis.to_axis(t) < axis.lo || axis.to_axis(t) > axis.hi) continue;
      axis.ticks.push_back(t);
      axis.labels.push_back(format("%g", t));
    }
  } else if (log) {
    log_ticks(axis);
  } else {
    linear_ticks(axis);
  }
  return axis;
}

struct Rect {
  int x, y, w, h;
  bool contains(double px, double py) const { return px >= x && px <= x + w && py >= y && py <= y + h; }
};

// The pixel positions of a series' points; NaN where a point cannot be drawn (a break in the line).
struct Points {
  std::vector<double> x, y;
};

Points project(const Series& s, const Axis& ax, const Axis& ay, const Rect& area) {
  Points p;
  const std::size_t count = std::min(s.x.size(), s.y.size());
  for (std::size_t i = 0; i < count; ++i) {
    const bool ok = usable(s.x[i], ax.log) && usable(s.y[i], ay.log);
    const double nan = std::numeric_limits<double>::quiet_NaN();
    p.x.push_back(ok ? area.x + ax.fraction(s.x[i]) * area.w : nan);
    p.y.push_back(ok ? area.y + area.h - ay.fraction(s.y[i]) * area.h : nan);
  }
  return p;
}

void draw_series(Canvas& canvas, const Series& s, const Points& p) {
  canvas.polyline(p.x, p.y, s.color, kLineWidth, s.dashed ? kDash : 0.0);
  for (std::size_t i = 0; i < p.x.size(); ++i) {
    if (!std::isnan(p.x[i])) canvas.fill_circle(p.x[i], p.y[i], kMarkerRadius, s.color);
  }
}

void draw_sample(Canvas& canvas, int x, int y_middle, const Series& s) {
  canvas.line(x, y_middle, x + kLegendSample, y_middle, s.color, kLineWidth, s.dashed ? kDash * 0.6 : 0.0);
  canvas.fill_circle(x + kLegendSample / 2.0, y_middle, kMarkerRadius, s.color);
}

std::vector<const Series*> named(const std::vector<Series>& series) {
  std::vector<const Series*> out;
  for (const Series& s : series) {
    if (!s.name.empty()) out.push_back(&s);
  }
  return out;
}

// A legend box in the corner of `area` that the lines cross least (sampled along each segment).
void draw_legend(Canvas& canvas, const Font& font, const std::vector<Series>& series, const std::vector<Points>& points,
                 const Rect& area) {
  const std::vector<const Series*> entries = named(series);
  if (entries.empty()) return;
  int text_width = 0;
  for (const Series* s : entries) text_width = std::max(text_width, font.measure(s->name, kLegendSize).width);
  const int w = kMargin + kLegendSample + 6 + text_width + kMargin;
  const int h = static_cast<int>(entries.size()) * kLegendRow + kMargin;
  const Rect corners[] = {
      {area.x + area.w - w - kMargin, area.y + kMargin, w, h},           // top right
      {area.x + kMargin, area.y + kMargin, w, h},                        // top left
      {area.x + area.w - w - kMargin, area.y + area.h - h - kMargin, w, h},  // bottom right
      {area.x + kMargin, area.y + area.h - h - kMargin, w, h},           // bottom left
  };
  constexpr int kSamplesPerSegment = 20;
  const Rect* best = &corners[0];
  int best_hits = std::numeric_limits<int>::max();
  for (const Rect& r : corners) {
    int hits = 0;
    for (const Points& p : points) {
      for (std::size_t i = 0; i + 1 < p.x.size(); ++i) {
        if (std::isnan(p.x[i]) || std::isnan(p.x[i + 1])) continue;
        for (int k = 0; k <= kSamplesPerSegment; ++k) {
          const double t = static_cast<double>(k) / kSamplesPerSegment;
          hits += r.contains(p.x[i] + t * (p.x[i + 1] - p.x[i]), p.y[i] + t * (p.y[i + 1] - p.y[i]));
        }
      }
    }
    if (hits < best_hits) best_hits = hits, best = &r;
  }
  canvas.fill_rect(best->x, best->y, best->w, best->h, kWhite);
  canvas.rect_outline(best->x, best->y, best->w, best->h, kLegendEdge);
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const int middle = best->y + kMargin / 2 + static_cast<int>(i) * kLegendRow + kLegendRow / 2;
    draw_sample(canvas, best->x + kMargin, middle, *entries[i]);
    const TextSize size = font.measure(entries[i]->name, kLegendSize);
    font.draw(canvas, best->x + kMargin + kLegendSample + 6, middle + (size.ascent - size.descent) / 2,
              entries[i]->name, kLegendSize, kTextColor);
  }
}

// One legend line under the title for series every panel shares.
void draw_shared_legend(Canvas& canvas, const Font& font, const std::vector<Series>& series, int y_middle) {
  const std::vector<const Series*> entries = named(series);
  constexpr int kGap = 24;
  int total = 0;
  for (const Series* s : entries) total += kLegendSample + 6 + font.measure(s->name, kLegendSize).width + kGap;
  int x = std::max(kMargin, (canvas.width() - total + kGap) / 2);
  for (const Series* s : entries) {
    draw_sample(canvas, x, y_middle, *s);
    const TextSize size = font.measure(s->name, kLegendSize);
    font.draw(canvas, x + kLegendSample + 6, y_middle + (size.ascent - size.descent) / 2, s->name, kLegendSize,
              kTextColor);
    x += kLegendSample + 6 + size.width + kGap;
  }
}

bool same_series(const std::vector<Panel>& panels) {
  if (panels.size() < 2) return false;
  const auto key = [](const Panel& p) {
    std::vector<std::tuple<std::string, std::uint8_t, std::uint8_t, std::uint8_t, bool>> k;
    for (const Series& s : p.series) {
      if (!s.name.empty()) k.emplace_back(s.name, s.color.r, s.color.g, s.color.b, s.dashed);
    }
    return k;
  };
  for (const Panel& p : panels) {
    if (key(p) != key(panels.front())) return false;
  }
  return !key(panels.front()).empty();
}

// Draws one panel into the cell at (x, y) of size w × h.
void draw_panel(Canvas& canvas, const Font& font, const Panel& panel, const Rect& cell, bool own_legend) {
  std::vector<double> xs, ys;
  for (const Series& s : panel.series) {
    xs.insert(xs.end(), s.x.begin(), s.x.end());
    ys.insert(ys.end(), s.y.begin(), s.y.end());
  }
  const Axis ax = make_axis(xs, panel.log_x, panel.x_ticks);
  if (std::isfinite(panel.y_min) && std::isfinite(panel.y_max)) ys = {panel.y_min, panel.y_max};
  const Axis ay = make_axis(ys, panel.log_y, {});

  const TextSize title = font.measure("Ag", kPanelTitleSize);
  const TextSize tick = font.measure("0", kTickSize);
  const TextSize label = font.measure("Ag", kLabelSize);
  int tick_width = 0;
  for (const std::string& l : ay.labels) tick_width = std::max(tick_width, font.measure(l, kTickSize).width);
  const int left = cell.x + kMargin + label.ascent + label.descent + kMargin + tick_width + kTickLength + 4;
  const int top = cell.y + kMargin + title.ascent + title.descent + kMargin;
  const int bottom = cell.y + cell.h - kMargin - label.ascent - label.descent - 6 - tick.ascent - kTickLength - 4;
  const Rect area{left, top, std::max(1, cell.x + cell.w - 2 * kMargin - left), std::max(1, bottom - top)};

  // Grid, then the data, then the frame and ticks over them.
  for (double t : ax.ticks) {
    const double px = area.x + ax.fraction(t) * area.w;
    canvas.line(px, area.y, px, area.y + area.h, kGridColor, 1.0);
  }
  for (double t : ay.ticks) {
    const double py = area.y + area.h - ay.fraction(t) * area.h;
    canvas.line(area.x, py, area.x + area.w, py, kGridColor, 1.0);
  }
  std::vector<Points> points;
  for (const Series& s : panel.series) points.push_back(project(s, ax, ay, area));
  for (std::size_t i = 0; i < panel.series.size(); ++i) draw_series(canvas, panel.series[i], points[i]);
  canvas.rect_outline(area.x, area.y, area.w + 1, area.h + 1, kAxisColor);

  // x ticks and labels, skipping a label that would overlap the last one drawn.
  int last_right = std::numeric_limits<int>::min();
  for (std::size_t i = 0; i < ax.ticks.size(); ++i) {
    const int px = static_cast<int>(std::lround(area.x + ax.fraction(ax.ticks[i]) * area.w));
    canvas.fill_rect(px, area.y + area.h, 1, kTickLength, kAxisColor);
    const int width = font.measure(ax.labels[i], kTickSize).width;
    if (px - width / 2 <= last_right + 4) continue;
    font.draw(canvas, px - width / 2, area.y + area.h + kTickLength + 3 + tick.ascent, ax.labels[i], kTickSize, kTextColor);
    last_right = px + width / 2;
  }
  for (std::size_t i = 0; i < ay.ticks.size(); ++i) {
    const int py = static_cast<int>(std::lround(area.y + area.h - ay.fraction(ay.ticks[i]) * area.h));
    canvas.fill_rect(area.x - kTickLength, py, kTickLength, 1, kAxisColor);
    const int width = font.measure(ay.labels[i], kTickSize).width;
    font.draw(canvas, area.x - kTickLength - 4 - width, py + tick.ascent / 2, ay.labels[i], kTickSize, kTextColor);
  }

  // Titles and axis labels, shortened with "…" when they do not fit.
  const std::string heading = font.fit(panel.title, kPanelTitleSize, cell.w - 2 * kMargin);
  font.draw(canvas, area.x + (area.w - font.measure(heading, kPanelTitleSize).width) / 2,
            cell.y + kMargin + title.ascent, heading, kPanelTitleSize, kTextColor);
  const std::string x_label = font.fit(panel.x_label, kLabelSize, area.w);
  font.draw(canvas, area.x + (area.w - font.measure(x_label, kLabelSize).width) / 2,
            cell.y + cell.h - kMargin - label.descent, x_label, kLabelSize, kTextColor);
  const std::string y_label = font.fit(panel.y_label, kLabelSize, area.h);
  font.draw(canvas, cell.x + kMargin + label.ascent, area.y + (area.h + font.measure(y_label, kLabelSize).width) / 2,
            y_label, kLabelSize, kTextColor, Direction::vertical_up);

  if (own_legend) draw_legend(canvas, font, panel.series, points, area);
}

}  // namespace

Canvas plot(const std::string& title, const std::vector<Panel>& panels, int columns, int panel_width, int panel_height) {
  const Font& font = Font::standard();
  columns = std::max(1, std::min(columns, static_cast<int>(std::max<std::size_t>(panels.size(), 1))));
  const int rows = (static_cast<int>(panels.size()) + columns - 1) / columns;
  const bool shared_legend = same_series(panels);
  const TextSize title_size = font.measure("Ag", kTitleSize);
  const int title_height = kMargin * 2 + title_size.ascent + title_size.descent;
  const int legend_height = shared_legend ? kLegendRow + kMargin : 0;
  const int header = title_height + legend_height;
  Canvas canvas(columns * panel_width, header + rows * panel_height);

  const std::string heading = font.fit(title, kTitleSize, canvas.width() - 2 * kMargin);
  font.draw(canvas, (canvas.width() - font.measure(heading, kTitleSize).width) / 2, kMargin + title_size.ascent, heading,
            kTitleSize, kTextColor);
  if (shared_legend) draw_shared_legend(canvas, font, panels.front().series, title_height + kLegendRow / 2);
  for (std::size_t i = 0; i < panels.size(); ++i) {
    const int column = static_cast<int>(i) % columns, row = static_cast<int>(i) / columns;
    draw_panel(canvas, font, panels[i], {column * panel_width, header + row * panel_height, panel_width, panel_height},
               !shared_legend);
  }
  return canvas;
}

}  // namespace attnkit::viz
