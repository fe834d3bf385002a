// attnkit tool — an RGB raster that the pictures (heatmaps, lab plots) are drawn on, and the few
// drawing primitives they need. Pixels outside the image are clipped, never an error.
#pragma once

#include <cstdint>
#include <vector>

namespace attnkit::viz {

struct Rgb {
  std::uint8_t r = 0, g = 0, b = 0;
  friend bool operator==(const Rgb&, const Rgb&) = default;
};

inline constexpr Rgb kWhite{255, 255, 255};
inline constexpr Rgb kBlack{0, 0, 0};
inline constexpr Rgb kGrey{128, 128, 128};

class Image {
 public:
  Image(int width, int height, Rgb background = kWhite);

  int width() const { return width_; }
  int height() const { return height_; }
  Rgb at(int x, int y) const;  // (0, 0) is the top left
  void set(int x, int y, Rgb color);
  // Mixes `color` over the pixel with coverage alpha in [0, 1] (text and anti-aliased lines).
  void blend(int x, int y, Rgb color, float alpha);

  void fill_rect(int x, int y, int w, int h, Rgb color);
  void rect_outline(int x, int y, int w, int h, Rgb color);
  // An anti-aliased line of the given width in pixels; dash > 0 draws dashes of that length.
  void line(double x0, double y0, double x1, double y1, Rgb color, double width = 1.0, double dash = 0.0);
  // Copies `other` with its top left at (x, y).
  void paste(const Image& other, int x, int y);

  const std::vector<Rgb>& pixels() const { return pixels_; }  // row-major, top row first

 private:
  int width_, height_;
  std::vector<Rgb> pixels_;
};

}  // namespace attnkit::viz
