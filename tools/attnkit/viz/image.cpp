// The RGB raster and its drawing primitives. Everything clips against the image: callers may pass
// any coordinates, including ones far outside or not finite.
#include "viz/image.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>

#include "attnkit/error.hpp"

namespace attnkit::viz {

namespace {

// Pixel bounds of one line's bounding box, clamped to the image before any conversion to int, so
// that huge coordinates never overflow an int.
struct Span {
  int first, last;  // inclusive; empty when first > last
};

Span clamp_span(double lo, double hi, int size) {
  lo = std::clamp(std::floor(lo), -1.0, static_cast<double>(size));
  hi = std::clamp(std::ceil(hi), -1.0, static_cast<double>(size));
  return {std::max(0, static_cast<int>(lo)), std::min(size - 1, static_cast<int>(hi))};
}

std::uint8_t mix(std::uint8_t under, std::uint8_t over, float alpha) {
  const float value = static_cast<float>(under) + (static_cast<float>(over) - static_cast<float>(under)) * alpha;
  return static_cast<std::uint8_t>(std::lround(std::clamp(value, 0.0f, 255.0f)));
}

}  // namespace

Image::Image(int width, int height, Rgb background) : width_(width), height_(height) {
  if (width < 0 || height < 0) {
    throw Error(ErrorCode::invalid_argument,
                "image size " + std::to_string(width) + " x " + std::to_string(height) + " is negative");
  }
  pixels_.assign(static_cast<std::size_t>(width) * static_cast<std::size_t>(height), background);
}

Rgb Image::at(int x, int y) const {
  if (x < 0 || y < 0 || x >= width_ || y >= height_) return kWhite;
  return pixels_[static_cast<std::size_t>(y) * static_cast<std::size_t>(width_) + static_cast<std::size_t>(x)];
}

void Image::set(int x, int y, Rgb color) {
  if (x < 0 || y < 0 || x >= width_ || y >= height_) return;
  pixels_[static_cast<std::size_t>(y) * static_cast<std::size_t>(width_) + static_cast<std::size_t>(x)] = color;
}

void Image::blend(int x, int y, Rgb color, float alpha) {
  if (x < 0 || y < 0 || x >= width_ || y >= height_ || !(alpha > 0.0f)) return;
  alpha = std::min(alpha, 1.0f);
  Rgb& p = pixels_[static_cast<std::size_t>(y) * static_cast<std::size_t>(width_) + static_cast<std::size_t>(x)];
  p = {mix(p.r, color.r, alpha), mix(p.g, color.g, alpha), mix(p.b, color.b, alpha)};
}

void Image::fill_rect(int x, int y, int w, int h, Rgb color) {
  // 64-bit ends: x + w may not fit in an int.
  const long long x0 = std::max(0LL, static_cast<long long>(x)), y0 = std::max(0LL, static_cast<long long>(y));
  const long long x1 = std::min(static_cast<long long>(width_), static_cast<long long>(x) + w);
  const long long y1 = std::min(static_cast<long long>(height_), static_cast<long long>(y) + h);
  for (long long row = y0; row < y1; ++row) {
    for (long long col = x0; col < x1; ++col) set(static_cast<int>(col), static_cast<int>(row), color);
  }
}

void Image::rect_outline(int x, int y, int w, int h, Rgb color) {
  if (w <= 0 || h <= 0) return;
  fill_rect(x, y, w, 1, color);
  fill_rect(x, y + h - 1, w, 1, color);
  fill_rect(x, y, 1, h, color);
  fill_rect(x + w - 1, y, 1, h, color);
}

// Coverage of each pixel is how much of it lies within width/2 of the segment, approximated by the
// distance from its centre (a one-pixel ramp), which gives smooth edges at any slope. The segment is
// first clipped to the image (plus the line's reach), so far-away ends cost nothing and keep the
// arithmetic precise.
void Image::line(double x0, double y0, double x1, double y1, Rgb color, double width, double dash) {
  if (!std::isfinite(x0) || !std::isfinite(y0) || !std::isfinite(x1) || !std::isfinite(y1) || !(width > 0.0)) return;
  const double half = width / 2.0;
  const double reach = half + 1.0;
  const double full_dx = x1 - x0, full_dy = y1 - y0;
  if (!std::isfinite(full_dx) || !std::isfinite(full_dy)) return;  // ends ~1e308 apart: nothing sensible to draw
  // Parametric clipping of P(t) = P0 + t·D, t in [0, 1], to the box (Liang–Barsky). A clipped end
  // is placed exactly on the box edge that clipped it and the other coordinate follows the slope:
  // P0 + t·D itself would cancel catastrophically for ends far outside.
  struct End {
    double t, x, y;
  };
  End start{0.0, x0, y0}, finish{1.0, x1, y1};
  const double edges[4] = {-reach, width_ + reach, -reach, height_ + reach};
  const double p[4] = {-full_dx, full_dx, -full_dy, full_dy};
  const double q[4] = {x0 - edges[0], edges[1] - x0, y0 - edges[2], edges[3] - y0};
  for (int e = 0; e < 4; ++e) {
    if (p[e] == 0.0) {
      if (q[e] < 0.0) return;  // parallel to this edge and outside it
      continue;
    }
    const double t = q[e] / p[e];
    End& end = p[e] < 0.0 ? start : finish;
    if (p[e] < 0.0 ? t <= end.t : t >= end.t) continue;
    end.t = t;
    if (e < 2) {
      end = {t, edges[e], y0 + (edges[e] - x0) * (full_dy / full_dx)};
    } else {
      end = {t, x0 + (edges[e] - y0) * (full_dx / full_dy), edges[e]};
    }
    if (start.t > finish.t) return;
  }
  const double dash_start = start.t * std::hypot(full_dx, full_dy);  // dashes keep their phase
  const double sx = start.x, sy = start.y, dx = finish.x - start.x, dy = finish.y - start.y;
  const Span xs = clamp_span(std::min(sx, sx + dx) - reach, std::max(sx, sx + dx) + reach, width_);
  const Span ys = clamp_span(std::min(sy, sy + dy) - reach, std::max(sy, sy + dy) + reach, height_);
  const double length2 = dx * dx + dy * dy;
  const double length = std::sqrt(length2);
  for (int y = ys.first; y <= ys.last; ++y) {
    for (int x = xs.first; x <= xs.last; ++x) {
      const double px = x + 0.5 - sx, py = y + 0.5 - sy;
      const double t = length2 > 0.0 ? std::clamp((px * dx + py * dy) / length2, 0.0, 1.0) : 0.0;
      if (dash > 0.0 && std::fmod(dash_start + t * length, 2.0 * dash) >= dash) continue;  // in a gap
      const double distance = std::hypot(px - t * dx, py - t * dy);
      const double coverage = std::clamp(half + 0.5 - distance, 0.0, 1.0);
      if (coverage > 0.0) blend(x, y, color, static_cast<float>(coverage));
    }
  }
}

void Image::paste(const Image& other, int x, int y) {
  for (int row = 0; row < other.height(); ++row) {
    for (int col = 0; col < other.width(); ++col) {
      const long long tx = static_cast<long long>(x) + col, ty = static_cast<long long>(y) + row;
      if (tx < 0 || ty < 0 || tx >= width_ || ty >= height_) continue;
      set(static_cast<int>(tx), static_cast<int>(ty), other.at(col, row));
    }
  }
}

}  // namespace attnkit::viz
