// attnkit_viz — pictures as files, through Cairo: PNG (8-bit RGB) or PDF, chosen by the file name's
// extension. PDF keeps lines and text as vectors, for papers. SVG is refused: Cairo 1.16's SVG
// backend leaks a recording surface it replays (LeakSanitizer shows it) and tags it with a pointer
// to a document it has freed, so a second SVG of the same drawing could come out broken.
#pragma once

#include <string>

#include "attnkit_viz/canvas.hpp"

namespace attnkit::viz {

enum class PictureFormat { png, pdf };

// By extension, case-insensitive: ".pdf" is PDF, anything else PNG, except ".svg", which raises
// Error(unsupported) naming the path and the formats there are.
PictureFormat picture_format(const std::string& path);

// Writes `canvas` as `format` (callers that stage a file under a temporary name pass the format of
// the name it will get: picture_format(final_path)). Raises attnkit::Error(io_error) naming the path
// when the file cannot be written, and Error(invalid_argument) for a PNG of no pixels.
void write_picture(const Canvas& canvas, const std::string& path, PictureFormat format);
// Reads an 8-bit PNG onto a canvas (an alpha channel is composited over white): for tests and for
// checking what was written.
Canvas read_png(const std::string& path);

}  // namespace attnkit::viz
