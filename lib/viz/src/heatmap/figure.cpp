// Layout and drawing of the heatmap figure. All sizes are in pixels; the constants below are the
// whole visual design, chosen by looking at the results.
#include "attnkit_viz/heatmap/figure.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "attnkit/error.hpp"
#include "attnkit_viz/colormap.hpp"
#include "attnkit_viz/text.hpp"
#include "downsample.hpp"

namespace attnkit::cli {

namespace {

using viz::Font;
using viz::Canvas;
using viz::Rgb;

constexpr int kMargin = 24;
constexpr int kTitlePx = 20, kNotePx = 13, kHeadPx = 14, kLabelPx = 12, kCaptionPx = 11;
constexpr int kLineGap = 5;          // between text lines of the header
constexpr int kHeaderGap = 14;       // between the header and the first row of panels
constexpr int kMaxCellPx = 36;       // small problems: cells stop growing here
constexpr int kMinPanelSide = 120;   // a very thin panel (n or m tiny) is stretched to this
constexpr int kMaxLabelWidth = 110;  // longer token labels are shortened with "…"
constexpr int kTick = 3, kLabelGap = 3;
constexpr int kPanelGapX = 28, kPanelGapY = 18;
constexpr int kHeadGap = 6;  // between the head number (and captions) and its panel
constexpr int kCaptionGap = 2;  // between caption lines
constexpr int kBarWidth = 16, kBarGap = 30, kBarMinHeight = 160, kBarTicks = 4;
constexpr int kMinWidth = 720;  // room for the header's lines next to a small grid
constexpr Rgb kTextColor{30, 30, 30};
constexpr Rgb kNoteColor{90, 90, 90};
constexpr Rgb kFrameColor{150, 150, 150};
constexpr const char* kSeparator = " \xC2\xB7 ";  // " · "

int line_height(const Font& font, int px) {
  const viz::TextSize s = font.measure("Ag", px);
  return s.ascent + s.descent;
}

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// 1, 2, 5, 10, 20, 50, ...: the smallest such step >= at_least.
std::int64_t nice_integer_step(std::int64_t at_least) {
  for (std::int64_t decade = 1;; decade *= 10) {
    for (std::int64_t f : {1, 2, 5}) {
      if (f * decade >= at_least) return f * decade;
    }
  }
}

struct AxisLabel {
  std::int64_t cell;
  std::string text;
};

// Labels for one axis: every token when they fit, else every 2nd, 3rd, ... (positions: 1, 2, 5, 10,
// ... apart), each at the cell holding its token.
std::vector<AxisLabel> axis_labels(const std::vector<std::string>& tokens, std::int64_t count, std::int64_t block,
                                   int cell_px, int pitch) {
  const double px_per_token = static_cast<double>(cell_px) / static_cast<double>(block);
  std::int64_t stride = std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(pitch / px_per_token)));
  if (tokens.empty()) stride = nice_integer_step(stride);
  const Font& font = Font::standard();
  std::vector<AxisLabel> labels;
  for (std::int64_t t = 0; t < count; t += stride) {
    const std::string text = tokens.empty() ? std::to_string(t)
                                            : font.fit(tokens[static_cast<std::size_t>(t)], kLabelPx, kMaxLabelWidth);
    labels.push_back({t / block, text});
  }
  return labels;
}

int widest(const std::vector<AxisLabel>& labels) {
  int w = 0;
  for (const AxisLabel& l : labels) w = std::max(w, Font::standard().measure(l.text, kLabelPx).width);
  return w;
}

double largest_weight(const HeadWeights& w) {
  double top = 0.0;
  for (const auto& matrix : w.weights) {
    for (float x : matrix) {
      if (std::isfinite(x)) top = std::max(top, static_cast<double>(x));
    }
  }
  return top;
}

double color_scale_top(const HeatmapFigure& f) {
  if (f.vmax) return *f.vmax;
  const double top = largest_weight(f.weights);
  return top > 0.0 ? top : 1.0;  // all zero: any scale shows it as 0
}

// Tick values for the colour bar: 0 and multiples of a 1-2-2.5-5 step up to vmax.
std::vector<double> bar_ticks(double vmax, int& decimals) {
  const double raw = vmax / kBarTicks;
  const double decade = std::pow(10.0, std::floor(std::log10(raw)));
  double step = decade;
  for (double f : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (f * decade >= raw) {
      step = f * decade;
      decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)) + (f == 2.5 ? 1 : 0));
      break;
    }
  }
  std::vector<double> ticks;
  for (int k = 0; k * step <= vmax * (1 + 1e-9); ++k) ticks.push_back(k * step);
  return ticks;
}

std::string format_number(double value, int decimals) {
  char text[32];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

std::vector<std::string> notes(const HeatmapFigure& f, const FigureLayout& l) {
  const HeadWeights& w = f.weights;
  std::string first = f.source;
  if (!first.empty()) first += kSeparator;
  first += std::to_string(w.heads.size()) + (w.heads.size() == 1 ? " head" : " heads") + kSeparator +
           "rows: n = " + std::to_string(w.n) + " queries" + kSeparator + "columns: m = " + std::to_string(w.m) +
           " keys";
  char top[32];
  std::snprintf(top, sizeof top, "%.3g", l.vmax);
  std::vector<std::string> lines{first, "colour: attention weight from 0 to " + std::string(top) +
                                            (f.vmax ? " (" + f.vmax_source + ")" : " (the largest weight shown)")};
  if (l.block_rows > 1 || l.block_cols > 1) {
    lines.push_back("downsampled to " + std::to_string(l.rows) + " \xC3\x97 " + std::to_string(l.cols) +
                    " cells: each cell is the maximum over a block of " + std::to_string(l.block_rows) +
                    " queries \xC3\x97 " + std::to_string(l.block_cols) + " keys (max pooling)");
  }
  return lines;
}

// Everything layout_figure computes beyond FigureLayout, which drawing needs too.
struct Geometry {
  FigureLayout layout;
  std::vector<AxisLabel> query_labels, key_labels;
  std::vector<std::string> notes;
  int title_y = 0, notes_y = 0, note_pitch = 0;  // baselines
  int label_ascent = 0, label_descent = 0;
  int bar_label_x = 0, caption_x = 0;
  std::vector<double> ticks;
  int tick_decimals = 0;
  int caption_pitch = 0;  // each caption line under a panel's title
};

// Outer labels only: queries on the grid's left column, keys under panels with none below them.
bool labels_left(const HeatmapFigure& f, const FigureLayout& l, std::size_t p) {
  return !f.outer_labels_only || p % static_cast<std::size_t>(l.columns) == 0;
}
bool labels_below(const HeatmapFigure& f, const FigureLayout& l, std::size_t p) {
  return !f.outer_labels_only || p + static_cast<std::size_t>(l.columns) >= f.weights.heads.size();
}

Geometry compute(const HeatmapFigure& f) {
  const HeadWeights& w = f.weights;
  if (w.heads.empty() || w.n <= 0 || w.m <= 0) {
    throw Error(ErrorCode::invalid_shape, "nothing to draw: " + std::to_string(w.heads.size()) + " heads of n = " +
                                              std::to_string(w.n) + " queries and m = " + std::to_string(w.m) +
                                              " keys");
  }
  const Font& font = Font::standard();
  Geometry g;
  FigureLayout& l = g.layout;
  l.vmax = color_scale_top(f);

  // Cells: square, as large as the panel target allows, stretched when one side is tiny.
  const std::int64_t max_cells = std::max<std::int64_t>(1, f.max_cells);
  l.block_rows = ceil_div(w.n, max_cells);
  l.block_cols = ceil_div(w.m, max_cells);
  l.rows = ceil_div(w.n, l.block_rows);
  l.cols = ceil_div(w.m, l.block_cols);
  const std::int64_t panel_side = std::max(1, f.panel_side);
  const auto side = static_cast<int>(std::clamp<std::int64_t>(panel_side / std::max(l.rows, l.cols), 1, kMaxCellPx));
  l.cell_w = side;
  l.cell_h = side;
  auto stretched = [](std::int64_t cells) {
    return static_cast<int>(std::min<std::int64_t>(kMaxCellPx, ceil_div(kMinPanelSide, cells)));
  };
  if (l.rows * side < kMinPanelSide) l.cell_h = stretched(l.rows);
  if (l.cols * side < kMinPanelSide) l.cell_w = stretched(l.cols);
  const int heat_w = static_cast<int>(l.cols) * l.cell_w, heat_h = static_cast<int>(l.rows) * l.cell_h;

  const viz::TextSize label_size = font.measure("Ag", kLabelPx);
  g.label_ascent = label_size.ascent;
  g.label_descent = label_size.descent;
  const int pitch = label_size.ascent + label_size.descent;
  g.query_labels = axis_labels(f.query_tokens, w.n, l.block_rows, l.cell_h, pitch);
  g.key_labels = axis_labels(f.key_tokens, w.m, l.block_cols, l.cell_w, pitch);
  const int left_w = kTick + kLabelGap + widest(g.query_labels) + kLabelGap;
  const int bottom_h = kTick + kLabelGap + widest(g.key_labels) + kLabelGap;
  std::size_t caption_lines = 0;
  for (const auto& lines : f.captions) caption_lines = std::max(caption_lines, lines.size());
  g.caption_pitch = line_height(font, kCaptionPx) + kCaptionGap;
  const int head_h = line_height(font, kHeadPx) + static_cast<int>(caption_lines) * g.caption_pitch + kHeadGap;

  // Header: title, then the notes.
  g.notes = notes(f, l);
  g.title_y = kMargin + font.measure("Ag", kTitlePx).ascent;
  g.note_pitch = line_height(font, kNotePx) + kLineGap;
  g.notes_y = g.title_y + font.measure("Ag", kTitlePx).descent + kLineGap + font.measure("Ag", kNotePx).ascent;
  const int header_h = g.notes_y + static_cast<int>(g.notes.size() - 1) * g.note_pitch +
                       font.measure("Ag", kNotePx).descent + kHeaderGap;

  // The grid of panels: about square unless the figure says how many columns. With labels on every
  // panel each grid cell has room for them; with outer labels only, the grid has it once, left and
  // below.
  const auto heads = static_cast<int>(w.heads.size());
  l.columns = f.columns > 0 ? std::min(f.columns, heads) : static_cast<int>(std::ceil(std::sqrt(static_cast<double>(heads))));
  const int grid_rows = (heads + l.columns - 1) / l.columns;
  const bool outer = f.outer_labels_only;
  const int pitch_x = heat_w + kPanelGapX + (outer ? 0 : left_w);
  const int pitch_y = head_h + heat_h + kPanelGapY + (outer ? 0 : bottom_h);
  for (int p = 0; p < heads; ++p) {
    const int x = kMargin + left_w + (p % l.columns) * pitch_x;
    const int y = header_h + head_h + (p / l.columns) * pitch_y;
    l.panels.push_back({x, y, heat_w, heat_h});
  }
  const int grid_right = kMargin + (outer ? left_w : 0) + l.columns * pitch_x - kPanelGapX;
  const int grid_bottom = header_h + grid_rows * pitch_y - kPanelGapY + (outer ? bottom_h : 0);

  // The colour bar beside the first row, with ticks and a caption.
  l.colorbar = {grid_right + kBarGap, header_h + head_h, kBarWidth, std::max(heat_h, kBarMinHeight)};
  g.ticks = bar_ticks(l.vmax, g.tick_decimals);
  int tick_w = 0;
  for (double t : g.ticks) tick_w = std::max(tick_w, font.measure(format_number(t, g.tick_decimals), kLabelPx).width);
  g.bar_label_x = l.colorbar.x + kBarWidth + kTick + kLabelGap;
  g.caption_x = g.bar_label_x + tick_w + 2 * kLabelGap + label_size.ascent;

  l.width = std::max(g.caption_x + label_size.descent + kMargin, kMinWidth);
  l.height = std::max(grid_bottom, l.colorbar.y + l.colorbar.h + bottom_h) + kMargin;
  return g;
}

struct PanelText {
  std::string title;
  std::vector<std::string> captions;
  bool left_labels = true, bottom_labels = true;
};

void draw_panel(Canvas& canvas, const Geometry& g, const Rect& r, const std::vector<float>& cells,
                const PanelText& text) {
  const Font& font = Font::standard();
  const FigureLayout& l = g.layout;
  std::vector<Rgb> colors(cells.size());
  std::transform(cells.begin(), cells.end(), colors.begin(), [&](float value) { return viz::colormap(value / l.vmax); });
  canvas.paint_cells(r.x, r.y, static_cast<int>(l.cols), static_cast<int>(l.rows), l.cell_w, l.cell_h, colors);
  canvas.rect_outline(r.x - 1, r.y - 1, r.w + 2, r.h + 2, kFrameColor);

  // The title, then the captions, centred above the heatmap; the last line ends kHeadGap above it.
  int baseline = r.y - kHeadGap - static_cast<int>(text.captions.size()) * g.caption_pitch -
                 font.measure(text.title, kHeadPx).descent;
  const int title_w = font.measure(text.title, kHeadPx).width;
  font.draw(canvas, r.x + (r.w - title_w) / 2, baseline, text.title, kHeadPx, kTextColor);
  baseline += font.measure(text.title, kHeadPx).descent;
  for (const std::string& line : text.captions) {
    baseline += g.caption_pitch;
    const int line_w = font.measure(line, kCaptionPx).width;
    font.draw(canvas, r.x + (r.w - line_w) / 2, baseline - kCaptionGap - font.measure(line, kCaptionPx).descent, line,
              kCaptionPx, kNoteColor);
  }

  const int text_centre = (g.label_ascent - g.label_descent) / 2;  // baseline offset that centres a label
  for (const AxisLabel& q : text.left_labels ? g.query_labels : std::vector<AxisLabel>{}) {
    const int cy = r.y + static_cast<int>(q.cell) * l.cell_h + l.cell_h / 2;
    canvas.fill_rect(r.x - 1 - kTick, cy, kTick, 1, kFrameColor);
    const int tw = font.measure(q.text, kLabelPx).width;
    font.draw(canvas, r.x - 1 - kTick - kLabelGap - tw, cy + text_centre, q.text, kLabelPx, kTextColor);
  }
  for (const AxisLabel& k : text.bottom_labels ? g.key_labels : std::vector<AxisLabel>{}) {
    const int cx = r.x + static_cast<int>(k.cell) * l.cell_w + l.cell_w / 2;
    canvas.fill_rect(cx, r.y + r.h + 1, 1, kTick, kFrameColor);
    const int tw = font.measure(k.text, kLabelPx).width;
    // Rotated to read upwards and ending just under the tick.
    font.draw(canvas, cx + text_centre, r.y + r.h + 1 + kTick + kLabelGap + tw, k.text, kLabelPx, kTextColor,
              viz::Direction::vertical_up);
  }
}

void draw_colorbar(Canvas& canvas, const Geometry& g) {
  const Font& font = Font::standard();
  const Rect& bar = g.layout.colorbar;
  std::vector<Rgb> gradient;  // one cell per pixel row, top = vmax
  for (int y = 0; y < bar.h; ++y) gradient.push_back(viz::colormap(1.0 - (y + 0.5) / bar.h));
  canvas.paint_cells(bar.x, bar.y, 1, bar.h, bar.w, 1, gradient);
  canvas.rect_outline(bar.x - 1, bar.y - 1, bar.w + 2, bar.h + 2, kFrameColor);
  const int text_centre = (g.label_ascent - g.label_descent) / 2;
  for (double t : g.ticks) {
    const int y = bar.y + bar.h - 1 - static_cast<int>(std::lround(t / g.layout.vmax * (bar.h - 1)));
    canvas.fill_rect(bar.x + bar.w + 1, y, kTick, 1, kFrameColor);
    font.draw(canvas, g.bar_label_x, y + text_centre, format_number(t, g.tick_decimals), kLabelPx, kTextColor);
  }
  const std::string caption = "attention weight";
  const int cw = font.measure(caption, kLabelPx).width;
  font.draw(canvas, g.caption_x, bar.y + (bar.h + cw) / 2, caption, kLabelPx, kNoteColor, viz::Direction::vertical_up);
}

}  // namespace

FigureLayout layout_figure(const HeatmapFigure& figure) { return compute(figure).layout; }

Canvas render_figure(const HeatmapFigure& figure) {
  const Geometry g = compute(figure);
  const FigureLayout& l = g.layout;
  const Font& font = Font::standard();
  Canvas canvas(l.width, l.height);
  const int text_width = l.width - 2 * kMargin;
  font.draw(canvas, kMargin, g.title_y, font.fit(figure.title, kTitlePx, text_width), kTitlePx, kTextColor);
  for (std::size_t i = 0; i < g.notes.size(); ++i) {
    font.draw(canvas, kMargin, g.notes_y + static_cast<int>(i) * g.note_pitch, font.fit(g.notes[i], kNotePx, text_width),
              kNotePx, kNoteColor);
  }
  const HeadWeights& w = figure.weights;
  for (std::size_t p = 0; p < w.heads.size(); ++p) {
    const Pooled pooled = max_pool(w.weights[p], w.n, w.m, std::max<std::int64_t>(1, figure.max_cells));
    std::string name = "head " + std::to_string(w.heads[p]);
    if (p < figure.head_names.size()) name += ": " + figure.head_names[p];
    if (p < figure.panel_titles.size()) name = figure.panel_titles[p];
    const int room = l.panels[p].w + kPanelGapX;
    PanelText text{font.fit(name, kHeadPx, room), {}, labels_left(figure, l, p), labels_below(figure, l, p)};
    if (p < figure.captions.size()) {
      for (const std::string& line : figure.captions[p]) text.captions.push_back(font.fit(line, kCaptionPx, room));
    }
    draw_panel(canvas, g, l.panels[p], pooled.cells, text);
  }
  draw_colorbar(canvas, g);
  return canvas;
}

}  // namespace attnkit::cli
