// attnkit_viz — text on canvases, drawn by Cairo with a font that fontconfig finds (DejaVu Sans
// from Debian's fonts-dejavu-core by default): anti-aliased, UTF-8, and text (not pixels) in PDF.
#pragma once

#include <string>
#include <string_view>

#include "attnkit_viz/canvas.hpp"

namespace attnkit::viz {

struct TextSize {
  int width = 0;    // advance of the whole string, in pixels
  int ascent = 0;   // above the baseline
  int descent = 0;  // below the baseline (positive)
};

enum class Direction { horizontal, vertical_up };  // vertical_up: rotated 90° counter-clockwise, reading bottom to top

class Font {
 public:
  // The process's font, loaded once. Raises attnkit::Error(io_error) when no font can be found, with
  // the hint to install fonts-dejavu-core.
  static const Font& standard();

  TextSize measure(std::string_view utf8, int pixel_size) const;
  // Draws with the start of the baseline at (x, y) (for vertical_up: the text runs upwards from
  // (x, y), its baseline on the vertical line through x). Returns the advance in pixels.
  int draw(Canvas& canvas, int x, int y, std::string_view utf8, int pixel_size, Rgb color,
           Direction direction = Direction::horizontal) const;
  // Shortens `utf8` with a trailing "…" until it fits in max_width pixels.
  std::string fit(std::string_view utf8, int pixel_size, int max_width) const;

  ~Font();
  Font(const Font&) = delete;
  Font& operator=(const Font&) = delete;

 private:
  Font();
  struct Impl;
  Impl* impl_;
};

}  // namespace attnkit::viz
