// Writing replays the canvas's recording onto a Cairo surface of the format asked for: a raster for
// PNG, a vector surface for PDF. Files are opened here rather than by Cairo, whose errors do
// not say why (a missing folder and a full disk are both "error while writing to output stream").
#include "attnkit_viz/picture_file.hpp"

#include <cairo-pdf.h>
#include <cairo.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include "attnkit/error.hpp"

namespace attnkit::viz {

namespace {

struct File {
  std::FILE* file;
  ~File() {
    if (file != nullptr) std::fclose(file);
  }
};

cairo_status_t write_bytes(void* file, const unsigned char* data, unsigned int length) {
  return std::fwrite(data, 1, length, static_cast<std::FILE*>(file)) == length ? CAIRO_STATUS_SUCCESS
                                                                             : CAIRO_STATUS_WRITE_ERROR;
}

cairo_status_t read_bytes(void* file, unsigned char* data, unsigned int length) {
  return std::fread(data, 1, length, static_cast<std::FILE*>(file)) == length ? CAIRO_STATUS_SUCCESS
                                                                            : CAIRO_STATUS_READ_ERROR;
}

const char* format_name(PictureFormat format) {
  switch (format) {
    case PictureFormat::pdf: return "PDF";
    case PictureFormat::png: break;
  }
  return "PNG";
}

// Replays the canvas onto `target`; a vector surface is then finished, which writes its file.
cairo_status_t replay(const Canvas& canvas, cairo_surface_t* target, bool vector) {
  cairo_t* cr = cairo_create(target);
  cairo_set_source_surface(cr, canvas.recording(), 0.0, 0.0);
  cairo_paint(cr);
  cairo_status_t status = cairo_status(cr);
  cairo_destroy(cr);
  if (vector) cairo_surface_finish(target);
  if (status == CAIRO_STATUS_SUCCESS) status = cairo_surface_status(target);
  return status;
}

}  // namespace

PictureFormat picture_format(const std::string& path) {
  std::string extension = path.size() >= 4 ? path.substr(path.size() - 4) : "";
  std::transform(extension.begin(), extension.end(), extension.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (extension == ".svg") {
    throw Error(ErrorCode::unsupported, path + ": SVG is not written (Cairo 1.16's SVG backend leaks what it "
                                               "replays); name a .pdf for a vector picture, or a .png");
  }
  if (extension == ".pdf") return PictureFormat::pdf;
  return PictureFormat::png;
}

void write_picture(const Canvas& canvas, const std::string& path, PictureFormat format) {
  if (format == PictureFormat::png && (canvas.width() <= 0 || canvas.height() <= 0)) {
    throw Error(ErrorCode::invalid_argument, "cannot write " + path + ": a PNG needs at least one pixel, got " +
                                                 std::to_string(canvas.width()) + " x " +
                                                 std::to_string(canvas.height()));
  }
  File out{std::fopen(path.c_str(), "wb")};
  if (out.file == nullptr) {
    throw Error(ErrorCode::io_error, std::string("cannot write ") + format_name(format) + " " + path + ": " +
                                         std::strerror(errno));
  }
  cairo_surface_t* target = nullptr;
  const double w = canvas.width(), h = canvas.height();
  switch (format) {
    case PictureFormat::pdf: target = cairo_pdf_surface_create_for_stream(write_bytes, out.file, w, h); break;
    case PictureFormat::png: target = cairo_image_surface_create(CAIRO_FORMAT_RGB24, canvas.width(), canvas.height()); break;
  }
  cairo_status_t status = replay(canvas, target, format != PictureFormat::png);
  if (format == PictureFormat::png && status == CAIRO_STATUS_SUCCESS) {
    status = cairo_surface_write_to_png_stream(target, write_bytes, out.file);
  }
  cairo_surface_destroy(target);
  const bool closed = std::fclose(std::exchange(out.file, nullptr)) == 0;
  if (status != CAIRO_STATUS_SUCCESS || !closed) {
    const std::string why = status == CAIRO_STATUS_WRITE_ERROR || !closed ? std::strerror(errno)
                                                                           : cairo_status_to_string(status);
    throw Error(ErrorCode::io_error, std::string("cannot write ") + format_name(format) + " " + path + ": " + why);
  }
}

Canvas read_png(const std::string& path) {
  File in{std::fopen(path.c_str(), "rb")};
  if (in.file == nullptr) throw Error(ErrorCode::io_error, "cannot read PNG " + path + ": " + std::strerror(errno));
  cairo_surface_t* image = cairo_image_surface_create_from_png_stream(read_bytes, in.file);
  if (cairo_surface_status(image) != CAIRO_STATUS_SUCCESS) {
    const std::string why = cairo_status_to_string(cairo_surface_status(image));
    cairo_surface_destroy(image);
    throw Error(ErrorCode::format_error, "cannot read PNG " + path + ": " + why);
  }
  Canvas canvas(cairo_image_surface_get_width(image), cairo_image_surface_get_height(image));
  cairo_t* cr = canvas.context();
  cairo_set_source_surface(cr, image, 0.0, 0.0);
  cairo_paint(cr);
  cairo_surface_destroy(image);
  return canvas;
}

}  // namespace attnkit::viz
