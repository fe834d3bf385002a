// attnkit_viz — the surface the pictures (heatmaps, lab plots) are drawn on, through Cairo. Drawing
// is recorded as vector operations, so one drawing can be written as PNG or PDF
// (attnkit_viz/picture_file.hpp); it is rasterised only when pixels are asked for. Coordinates are pixels,
// (0, 0) the top left; anything outside the canvas is clipped, never an error.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

typedef struct _cairo cairo_t;
typedef struct _cairo_surface cairo_surface_t;

namespace attnkit::viz {

struct Rgb {
  std::uint8_t r = 0, g = 0, b = 0;
  friend bool operator==(const Rgb&, const Rgb&) = default;
};

inline constexpr Rgb kWhite{255, 255, 255};
inline constexpr Rgb kBlack{0, 0, 0};
inline constexpr Rgb kGrey{128, 128, 128};

// Cairo's raster surfaces stop at 32767 pixels a side; a larger canvas is refused when it is made.
inline constexpr int kMaxCanvasSide = 32767;

class Canvas {
 public:
  // Raises Error(invalid_argument) for a negative size or a side above kMaxCanvasSide.
  Canvas(int width, int height, Rgb background = kWhite);
  ~Canvas();
  Canvas(Canvas&&) noexcept;
  Canvas& operator=(Canvas&&) noexcept;
  Canvas(const Canvas&) = delete;
  Canvas& operator=(const Canvas&) = delete;

  int width() const { return width_; }
  int height() const { return height_; }

  // ---- drawing ----
  void set(int x, int y, Rgb color);  // one pixel
  void fill_rect(int x, int y, int w, int h, Rgb color);
  void rect_outline(int x, int y, int w, int h, Rgb color);  // one pixel wide, inside the rectangle
  // An anti-aliased line of the given width; dash > 0 draws dashes and gaps of that length.
  void line(double x0, double y0, double x1, double y1, Rgb color, double width = 1.0, double dash = 0.0);
  // Joined segments through the points (same length); a non-finite point breaks the line.
  void polyline(const std::vector<double>& x, const std::vector<double>& y, Rgb color, double width,
                double dash = 0.0);
  void fill_circle(double cx, double cy, double radius, Rgb color);
  // A grid of `columns` x `rows` cells (row-major colours), each cell_w x cell_h pixels, its top
  // left at (x, y): one image, so that a vector file holds a heatmap as one picture, not a shape per cell.
  void paint_cells(int x, int y, int columns, int rows, int cell_w, int cell_h, const std::vector<Rgb>& colors);

  // For text.cpp and picture_file.cpp: the Cairo context drawing goes through, and the
  // recording it fills. Using the context marks the raster stale.
  cairo_t* context();
  cairo_surface_t* recording() const { return recording_; }

  // ---- pixels (rasterised on first use after a change) ----
  Rgb at(int x, int y) const;  // white outside the canvas
  const std::vector<Rgb>& pixels() const;  // row-major, top row first

 private:
  void set_color(Rgb color);
  void rasterise() const;

  int width_ = 0, height_ = 0;
  cairo_surface_t* recording_ = nullptr;
  cairo_t* cr_ = nullptr;
  mutable std::vector<Rgb> pixels_;
  mutable bool stale_ = true;
};

}  // namespace attnkit::viz
