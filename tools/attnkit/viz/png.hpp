// attnkit tool — PNG files through libpng (8-bit RGB).
#pragma once

#include <string>

#include "viz/image.hpp"

namespace attnkit::viz {

// Writes `image` as an 8-bit RGB PNG. Raises attnkit::Error(io_error) naming the path on failure.
void write_png(const Image& image, const std::string& path);
// Reads an 8-bit RGB or RGBA PNG (alpha dropped): for tests and for checking what was written.
Image read_png(const std::string& path);

}  // namespace attnkit::viz
