// attnkit tool — pictures as files, through Cairo: PNG (8-bit RGB), SVG or PDF, chosen by the file
// name's extension. SVG and PDF keep lines and glyphs as vectors, for papers.
#pragma once

#include <string>

#include "viz/canvas.hpp"

namespace attnkit::viz {

enum class PictureFormat { png, svg, pdf };

// By extension, case-insensitive: ".svg" and ".pdf"; anything else is PNG.
PictureFormat picture_format(const std::string& path);

// Writes `canvas` as `format` (callers that stage a file under a temporary name pass the format of
// the name it will get: picture_format(final_path)). Raises attnkit::Error(io_error) naming the path
// when the file cannot be written, and Error(invalid_argument) for a PNG of no pixels.
void write_picture(const Canvas& canvas, const std::string& path, PictureFormat format);
// Reads an 8-bit PNG onto a canvas (an alpha channel is composited over white): for tests and for
// checking what was written.
Canvas read_png(const std::string& path);

}  // namespace attnkit::viz
