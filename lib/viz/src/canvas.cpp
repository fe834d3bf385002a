// The canvas: a Cairo recording surface and its context. Lines are clipped to the canvas here,
// before Cairo sees them: Cairo holds coordinates in 24.8 fixed point, so an end 1e300 pixels away
// must become a point on the canvas's edge first.
#include "attnkit_viz/canvas.hpp"

#include <cairo.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <optional>
#include <string>
#include <utility>

#include "attnkit/error.hpp"

namespace attnkit::viz {

namespace {

constexpr double kChannel = 255.0;

struct Segment {
  double x0, y0, x1, y1;
  double offset;  // distance from the original start to the clipped start (keeps dashes in phase)
};

// Parametric clipping of P(t) = P0 + t·D, t in [0, 1], to the box [lo_x, hi_x] x [lo_y, hi_y]
// (Liang–Barsky). A clipped end is placed exactly on the box edge that clipped it and the other
// coordinate follows the slope: P0 + t·D itself would cancel catastrophically for ends far outside.
std::optional<Segment> clip(double x0, double y0, double x1, double y1, double lo_x, double hi_x, double lo_y,
                            double hi_y) {
  if (!std::isfinite(x0) || !std::isfinite(y0) || !std::isfinite(x1) || !std::isfinite(y1)) return std::nullopt;
  const double dx = x1 - x0, dy = y1 - y0;
  if (!std::isfinite(dx) || !std::isfinite(dy)) return std::nullopt;  // ends ~1e308 apart: nothing sensible
  struct End {
    double t, x, y;
  };
  End start{0.0, x0, y0}, finish{1.0, x1, y1};
  const double edges[4] = {lo_x, hi_x, lo_y, hi_y};
  const double p[4] = {-dx, dx, -dy, dy};
  const double q[4] = {x0 - lo_x, hi_x - x0, y0 - lo_y, hi_y - y0};
  for (int e = 0; e < 4; ++e) {
    if (p[e] == 0.0) {
      if (q[e] < 0.0) return std::nullopt;  // parallel to this edge and outside it
      continue;
    }
    const double t = q[e] / p[e];
    End& end = p[e] < 0.0 ? start : finish;
    if (p[e] < 0.0 ? t <= end.t : t >= end.t) continue;
    end = e < 2 ? End{t, edges[e], y0 + (edges[e] - x0) * (dy / dx)} : End{t, x0 + (edges[e] - y0) * (dx / dy), edges[e]};
    if (start.t > finish.t) return std::nullopt;
  }
  return Segment{start.x, start.y, finish.x, finish.y, start.t * std::hypot(dx, dy)};
}

}  // namespace

Canvas::Canvas(int width, int height, Rgb background) : width_(width), height_(height) {
  if (width < 0 || height < 0 || width > kMaxCanvasSide || height > kMaxCanvasSide) {
    throw Error(ErrorCode::invalid_argument, "picture size " + std::to_string(width) + " x " + std::to_string(height) +
                                                 (width < 0 || height < 0 ? " is negative"
                                                                          : " is larger than " +
                                                                                std::to_string(kMaxCanvasSide) +
                                                                                " pixels a side (Cairo's limit)"));
  }
  const cairo_rectangle_t extents{0.0, 0.0, static_cast<double>(width), static_cast<double>(height)};
  recording_ = cairo_recording_surface_create(CAIRO_CONTENT_COLOR, &extents);
  cr_ = cairo_create(recording_);
  if (cairo_status(cr_) != CAIRO_STATUS_SUCCESS) {
    const std::string why = cairo_status_to_string(cairo_status(cr_));
    cairo_destroy(cr_);
    cairo_surface_destroy(recording_);
    throw Error(ErrorCode::out_of_memory, "cannot start a picture with Cairo: " + why);
  }
  fill_rect(0, 0, width, height, background);
}

Canvas::~Canvas() {
  if (cr_ != nullptr) cairo_destroy(cr_);
  if (recording_ != nullptr) cairo_surface_destroy(recording_);
}

Canvas::Canvas(Canvas&& other) noexcept
    : width_(other.width_), height_(other.height_), recording_(std::exchange(other.recording_, nullptr)),
      cr_(std::exchange(other.cr_, nullptr)), pixels_(std::move(other.pixels_)), stale_(other.stale_) {}

Canvas& Canvas::operator=(Canvas&& other) noexcept {
  // Swapped: `other` releases this canvas's old surface when it goes.
  std::swap(width_, other.width_);
  std::swap(height_, other.height_);
  std::swap(recording_, other.recording_);
  std::swap(cr_, other.cr_);
  std::swap(pixels_, other.pixels_);
  std::swap(stale_, other.stale_);
  return *this;
}

cairo_t* Canvas::context() {
  stale_ = true;
  return cr_;
}

void Canvas::set_color(Rgb color) {
  cairo_set_source_rgb(context(), color.r / kChannel, color.g / kChannel, color.b / kChannel);
}

void Canvas::set(int x, int y, Rgb color) { fill_rect(x, y, 1, 1, color); }

void Canvas::fill_rect(int x, int y, int w, int h, Rgb color) {
  // Clamped to the canvas in 64 bits first: x + w may not fit in an int.
  const long long x0 = std::max(0LL, static_cast<long long>(x)), y0 = std::max(0LL, static_cast<long long>(y));
  const long long x1 = std::min(static_cast<long long>(width_), static_cast<long long>(x) + w);
  const long long y1 = std::min(static_cast<long long>(height_), static_cast<long long>(y) + h);
  if (x1 <= x0 || y1 <= y0) return;
  set_color(color);
  cairo_rectangle(cr_, static_cast<double>(x0), static_cast<double>(y0), static_cast<double>(x1 - x0),
                  static_cast<double>(y1 - y0));
  cairo_fill(cr_);
}

void Canvas::rect_outline(int x, int y, int w, int h, Rgb color) {
  if (w <= 0 || h <= 0) return;
  fill_rect(x, y, w, 1, color);
  fill_rect(x, y + h - 1, w, 1, color);
  fill_rect(x, y, 1, h, color);
  fill_rect(x + w - 1, y, 1, h, color);
}

void Canvas::line(double x0, double y0, double x1, double y1, Rgb color, double width, double dash) {
  polyline({x0, x1}, {y0, y1}, color, width, dash);
}

void Canvas::polyline(const std::vector<double>& x, const std::vector<double>& y, Rgb color, double width,
                      double dash) {
  if (!(width > 0.0) || !std::isfinite(width)) return;
  const double reach = width / 2.0 + 1.0;  // a line just off the canvas may still touch its edge
  bool drawing = false;                    // whether the path's current point ends the last segment
  double last_x = 0.0, last_y = 0.0;
  double dash_offset = -1.0;  // of the first segment drawn: dashes keep their phase when its start was clipped
  for (std::size_t i = 0; i + 1 < std::min(x.size(), y.size()); ++i) {
    const std::optional<Segment> s =
        clip(x[i], y[i], x[i + 1], y[i + 1], -reach, width_ + reach, -reach, height_ + reach);
    if (!s) {
      drawing = false;
      continue;
    }
    if (dash_offset < 0.0) dash_offset = s->offset;
    if (!drawing || s->x0 != last_x || s->y0 != last_y) cairo_move_to(context(), s->x0, s->y0);
    cairo_line_to(cr_, s->x1, s->y1);
    drawing = true;
    last_x = s->x1;
    last_y = s->y1;
  }
  if (!cairo_has_current_point(cr_)) return;
  set_color(color);
  cairo_set_line_width(cr_, width);
  cairo_set_line_join(cr_, CAIRO_LINE_JOIN_ROUND);
  const double on_off[2] = {dash, dash};
  cairo_set_dash(cr_, on_off, dash > 0.0 ? 2 : 0, dash > 0.0 ? dash_offset : 0.0);
  cairo_stroke(cr_);
}

void Canvas::fill_circle(double cx, double cy, double radius, Rgb color) {
  if (!std::isfinite(cx) || !std::isfinite(cy) || !(radius > 0.0)) return;
  if (cx < -radius || cy < -radius || cx > width_ + radius || cy > height_ + radius) return;
  set_color(color);
  cairo_new_sub_path(cr_);
  cairo_arc(cr_, cx, cy, radius, 0.0, 2.0 * M_PI);
  cairo_fill(cr_);
}

void Canvas::paint_cells(int x, int y, int columns, int rows, int cell_w, int cell_h, const std::vector<Rgb>& colors) {
  if (columns <= 0 || rows <= 0 || cell_w <= 0 || cell_h <= 0 ||
      colors.size() < static_cast<std::size_t>(columns) * static_cast<std::size_t>(rows)) {
    return;
  }
  // Drawn at the canvas's resolution (each cell's colour repeated over its pixels) rather than as a
  // small image scaled up: PDF viewers smooth scaled images, which would blur every cell's edge.
  const int w = columns * cell_w, h = rows * cell_h;
  cairo_surface_t* cells = cairo_image_surface_create(CAIRO_FORMAT_RGB24, w, h);
  if (cairo_surface_status(cells) != CAIRO_STATUS_SUCCESS) {
    cairo_surface_destroy(cells);
    throw Error(ErrorCode::out_of_memory, "cannot make an image of " + std::to_string(w) + " x " +
                                              std::to_string(h) + " pixels with Cairo");
  }
  cairo_surface_flush(cells);
  unsigned char* data = cairo_image_surface_get_data(cells);
  const int stride = cairo_image_surface_get_stride(cells);
  for (int py = 0; py < h; ++py) {
    auto* row = reinterpret_cast<std::uint32_t*>(data + static_cast<std::ptrdiff_t>(py) * stride);
    const std::size_t first = static_cast<std::size_t>(py / cell_h) * static_cast<std::size_t>(columns);
    for (int px = 0; px < w; ++px) {
      const Rgb& p = colors[first + static_cast<std::size_t>(px / cell_w)];
      row[px] = (std::uint32_t{p.r} << 16) | (std::uint32_t{p.g} << 8) | std::uint32_t{p.b};  // RGB24: 0x00RRGGBB
    }
  }
  cairo_surface_mark_dirty(cells);
  cairo_t* cr = context();
  cairo_set_source_surface(cr, cells, x, y);
  cairo_rectangle(cr, x, y, w, h);
  cairo_fill(cr);
  cairo_surface_destroy(cells);  // the recording keeps its own reference
}

void Canvas::rasterise() const {
  if (!stale_) return;
  pixels_.assign(static_cast<std::size_t>(width_) * static_cast<std::size_t>(height_), kWhite);
  if (!pixels_.empty()) {
    cairo_surface_t* raster = cairo_image_surface_create(CAIRO_FORMAT_RGB24, width_, height_);
    cairo_t* cr = cairo_create(raster);
    cairo_set_source_surface(cr, recording_, 0.0, 0.0);
    cairo_paint(cr);
    cairo_destroy(cr);
    cairo_surface_flush(raster);
    if (cairo_surface_status(raster) != CAIRO_STATUS_SUCCESS) {
      const std::string why = cairo_status_to_string(cairo_surface_status(raster));
      cairo_surface_destroy(raster);
      throw Error(ErrorCode::out_of_memory, "cannot rasterise a picture of " + std::to_string(width_) + " x " +
                                                std::to_string(height_) + " pixels with Cairo: " + why);
    }
    const unsigned char* data = cairo_image_surface_get_data(raster);
    const int stride = cairo_image_surface_get_stride(raster);
    for (int y = 0; y < height_; ++y) {
      const auto* row = reinterpret_cast<const std::uint32_t*>(data + static_cast<std::ptrdiff_t>(y) * stride);
      for (int x = 0; x < width_; ++x) {
        const std::uint32_t v = row[x];
        pixels_[static_cast<std::size_t>(y) * static_cast<std::size_t>(width_) + static_cast<std::size_t>(x)] = {
            static_cast<std::uint8_t>(v >> 16), static_cast<std::uint8_t>(v >> 8), static_cast<std::uint8_t>(v)};
      }
    }
    cairo_surface_destroy(raster);
  }
  stale_ = false;
}

Rgb Canvas::at(int x, int y) const {
  if (x < 0 || y < 0 || x >= width_ || y >= height_) return kWhite;
  rasterise();
  return pixels_[static_cast<std::size_t>(y) * static_cast<std::size_t>(width_) + static_cast<std::size_t>(x)];
}

const std::vector<Rgb>& Canvas::pixels() const {
  rasterise();
  return pixels_;
}

}  // namespace attnkit::viz
