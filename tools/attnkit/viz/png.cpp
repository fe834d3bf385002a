// PNG files through libpng's simplified API (png_image), which handles every colour type and bit
// depth on reading and needs no setjmp error handling.
#include "viz/png.hpp"

#include <png.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "attnkit/error.hpp"

namespace attnkit::viz {

namespace {

constexpr int kRgbChannels = 3, kRgbaChannels = 4;

std::string libpng_message(const png_image& image) {
  return image.message[0] != '\0' ? std::string(image.message) : std::string("unknown libpng error");
}

}  // namespace

void write_png(const Image& image, const std::string& path) {
  if (image.width() <= 0 || image.height() <= 0) {
    throw Error(ErrorCode::invalid_argument, "cannot write " + path + ": a PNG needs at least one pixel, got " +
                                                 std::to_string(image.width()) + " x " +
                                                 std::to_string(image.height()));
  }
  std::vector<std::uint8_t> bytes;
  bytes.reserve(image.pixels().size() * kRgbChannels);
  for (const Rgb& p : image.pixels()) bytes.insert(bytes.end(), {p.r, p.g, p.b});

  png_image png{};
  png.version = PNG_IMAGE_VERSION;
  png.width = static_cast<png_uint_32>(image.width());
  png.height = static_cast<png_uint_32>(image.height());
  png.format = PNG_FORMAT_RGB;
  if (png_image_write_to_file(&png, path.c_str(), 0, bytes.data(), 0, nullptr) == 0) {
    const std::string message = libpng_message(png);
    png_image_free(&png);
    throw Error(ErrorCode::io_error, "cannot write PNG " + path + ": " + message);
  }
}

Image read_png(const std::string& path) {
  png_image png{};
  png.version = PNG_IMAGE_VERSION;
  if (png_image_begin_read_from_file(&png, path.c_str()) == 0) {
    throw Error(ErrorCode::io_error, "cannot read PNG " + path + ": " + libpng_message(png));
  }
  png.format = PNG_FORMAT_RGBA;  // any input becomes 8-bit RGBA; the alpha is then dropped
  std::vector<std::uint8_t> bytes(PNG_IMAGE_SIZE(png));
  if (png_image_finish_read(&png, nullptr, bytes.data(), 0, nullptr) == 0) {
    const std::string message = libpng_message(png);
    png_image_free(&png);
    throw Error(ErrorCode::format_error, "cannot read PNG " + path + ": " + message);
  }
  Image image(static_cast<int>(png.width), static_cast<int>(png.height));
  std::size_t at = 0;
  for (int y = 0; y < image.height(); ++y) {
    for (int x = 0; x < image.width(); ++x, at += kRgbaChannels) image.set(x, y, {bytes[at], bytes[at + 1], bytes[at + 2]});
  }
  return image;
}

}  // namespace attnkit::viz
