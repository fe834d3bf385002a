// Text through Cairo's FreeType backend. The font file comes from fontconfig ("DejaVu Sans"), else
// from the path where Debian's fonts-dejavu-core puts it. Metrics are hinted (whole-pixel advances),
// so the layouts built on measure() line up on the pixel grid as they did before Cairo.
#include "attnkit_viz/text.hpp"

#include <cairo-ft.h>
#include <cairo.h>
#include <fontconfig/fontconfig.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "attnkit/error.hpp"

namespace attnkit::viz {

namespace {

constexpr const char* kFamily = "DejaVu Sans";
constexpr const char* kFallbackPath = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";
constexpr char32_t kReplacement = 0xFFFD;
constexpr const char* kEllipsis = "\xE2\x80\xA6";  // U+2026 "…"
constexpr double kChannel = 255.0;

// One code point at the start of `text` and its length in bytes; a malformed or truncated sequence
// reads as U+FFFD of length 1, so that any label can be drawn (Cairo refuses invalid UTF-8).
struct CodePoint {
  char32_t code;
  std::size_t bytes;
};

CodePoint next_code_point(std::string_view text) {
  const auto lead = static_cast<unsigned char>(text[0]);
  if (lead < 0x80) return {lead, 1};
  const std::size_t length = (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xE ? 3 : (lead >> 3) == 0x1E ? 4 : 0;
  if (length == 0 || length > text.size()) return {kReplacement, 1};
  char32_t code = lead & (0x7F >> length);
  for (std::size_t k = 1; k < length; ++k) {
    const auto next = static_cast<unsigned char>(text[k]);
    if ((next & 0xC0) != 0x80) return {kReplacement, 1};
    code = (code << 6) | (next & 0x3F);
  }
  return {code, length};
}

std::vector<char32_t> decode_utf8(std::string_view text) {
  std::vector<char32_t> out;
  for (std::size_t i = 0; i < text.size();) {
    const CodePoint c = next_code_point(text.substr(i));
    out.push_back(c.code);
    i += c.bytes;
  }
  return out;
}

// `text` as valid UTF-8 for Cairo: malformed bytes and NUL (which would end a C string) become U+FFFD.
std::string drawable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const CodePoint c = next_code_point(text.substr(i));
    const bool surrogate = c.code >= 0xD800 && c.code <= 0xDFFF;
    if (c.code == kReplacement || c.code == 0 || surrogate || c.code > 0x10FFFF) {
      out += "\xEF\xBF\xBD";
    } else {
      out.append(text.substr(i, c.bytes));
    }
    i += c.bytes;
  }
  return out;
}

// Byte length of the first `count` code points, as decode_utf8 splits them.
std::size_t utf8_prefix_bytes(std::string_view text, std::size_t count) {
  std::size_t i = 0;
  for (std::size_t c = 0; c < count && i < text.size(); ++c) i += next_code_point(text.substr(i)).bytes;
  return i;
}

std::string find_font_file() {
  std::string path;
  if (FcConfig* config = FcInitLoadConfigAndFonts()) {
    FcPattern* pattern = FcNameParse(reinterpret_cast<const FcChar8*>(kFamily));
    FcConfigSubstitute(config, pattern, FcMatchPattern);
    FcDefaultSubstitute(pattern);
    FcResult result = FcResultNoMatch;
    if (FcPattern* match = FcFontMatch(config, pattern, &result)) {
      FcChar8* file = nullptr;
      if (FcPatternGetString(match, FC_FILE, 0, &file) == FcResultMatch && file != nullptr) {
        path = reinterpret_cast<const char*>(file);
      }
      FcPatternDestroy(match);
    }
    FcPatternDestroy(pattern);
    FcConfigDestroy(config);
  }
  if (!path.empty() && std::filesystem::exists(path)) return path;
  if (std::filesystem::exists(kFallbackPath)) return kFallbackPath;
  throw Error(ErrorCode::io_error, std::string("no font found for text on images: fontconfig has no '") + kFamily +
                                       "' and " + kFallbackPath +
                                       " does not exist; install Debian's fonts-dejavu-core (apt-get install "
                                       "fonts-dejavu-core)");
}

}  // namespace

struct Font::Impl {
  cairo_font_face_t* face = nullptr;
  cairo_font_options_t* options = nullptr;
  std::mutex mutex;                              // guards `sizes`
  std::map<int, cairo_scaled_font_t*> sizes;     // the face at each pixel size measured so far

  cairo_scaled_font_t* at_size(int pixel_size) {
    const std::lock_guard lock(mutex);
    cairo_scaled_font_t*& font = sizes[pixel_size];
    if (font == nullptr) {
      cairo_matrix_t size, identity;
      cairo_matrix_init_scale(&size, pixel_size, pixel_size);
      cairo_matrix_init_identity(&identity);
      font = cairo_scaled_font_create(face, &size, &identity, options);
    }
    return font;
  }
};

Font::Font() : impl_(new Impl) {
  const std::string path = find_font_file();
  FcPattern* pattern = FcPatternCreate();
  FcPatternAddString(pattern, FC_FILE, reinterpret_cast<const FcChar8*>(path.c_str()));
  impl_->face = cairo_ft_font_face_create_for_pattern(pattern);
  FcPatternDestroy(pattern);  // Cairo keeps its own copy
  if (cairo_font_face_status(impl_->face) != CAIRO_STATUS_SUCCESS) {
    const std::string why = cairo_status_to_string(cairo_font_face_status(impl_->face));
    cairo_font_face_destroy(impl_->face);
    delete impl_;
    throw Error(ErrorCode::format_error, "cannot load font " + path + " with Cairo (" + why +
                                             "); reinstall fonts-dejavu-core");
  }
  impl_->options = cairo_font_options_create();
  cairo_font_options_set_antialias(impl_->options, CAIRO_ANTIALIAS_GRAY);
  cairo_font_options_set_hint_style(impl_->options, CAIRO_HINT_STYLE_SLIGHT);
  cairo_font_options_set_hint_metrics(impl_->options, CAIRO_HINT_METRICS_ON);
}

Font::~Font() {
  for (auto& [size, font] : impl_->sizes) cairo_scaled_font_destroy(font);
  cairo_font_options_destroy(impl_->options);
  cairo_font_face_destroy(impl_->face);
  delete impl_;
}

const Font& Font::standard() {
  static const Font font;
  return font;
}

TextSize Font::measure(std::string_view utf8, int pixel_size) const {
  cairo_scaled_font_t* font = impl_->at_size(std::max(1, pixel_size));
  cairo_text_extents_t text;
  cairo_scaled_font_text_extents(font, drawable(utf8).c_str(), &text);
  cairo_font_extents_t extents;
  cairo_scaled_font_extents(font, &extents);
  return {static_cast<int>(std::lround(text.x_advance)), static_cast<int>(std::ceil(extents.ascent)),
          static_cast<int>(std::ceil(extents.descent))};
}

int Font::draw(Canvas& canvas, int x, int y, std::string_view utf8, int pixel_size, Rgb color,
               Direction direction) const {
  cairo_t* cr = canvas.context();
  cairo_save(cr);
  cairo_set_source_rgb(cr, color.r / kChannel, color.g / kChannel, color.b / kChannel);
  cairo_translate(cr, x, y);
  if (direction == Direction::vertical_up) cairo_rotate(cr, -M_PI / 2.0);  // reads bottom to top
  cairo_set_font_face(cr, impl_->face);
  cairo_set_font_size(cr, std::max(1, pixel_size));
  cairo_set_font_options(cr, impl_->options);
  cairo_move_to(cr, 0.0, 0.0);
  cairo_show_text(cr, drawable(utf8).c_str());
  cairo_restore(cr);
  return measure(utf8, pixel_size).width;
}

std::string Font::fit(std::string_view utf8, int pixel_size, int max_width) const {
  if (measure(utf8, pixel_size).width <= max_width) return std::string(utf8);
  // Binary search on the number of code points kept before the ellipsis (width grows with it).
  std::size_t low = 0, high = decode_utf8(utf8).size();
  while (low < high) {
    const std::size_t mid = (low + high + 1) / 2;
    const std::string candidate = std::string(utf8.substr(0, utf8_prefix_bytes(utf8, mid))) + kEllipsis;
    if (measure(candidate, pixel_size).width <= max_width) {
      low = mid;
    } else {
      high = mid - 1;
    }
  }
  const std::string shortened = std::string(utf8.substr(0, utf8_prefix_bytes(utf8, low))) + kEllipsis;
  return measure(shortened, pixel_size).width <= max_width ? shortened : std::string();
}

}  // namespace attnkit::viz
