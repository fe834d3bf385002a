// Text rendering with FreeType. The font file comes from fontconfig ("DejaVu Sans"), else from the
// path where Debian's fonts-dejavu-core puts it; glyphs are rendered as 8-bit coverage bitmaps and
// blended onto the image, rotated for vertical labels.
#include "viz/text.hpp"

#include <fontconfig/fontconfig.h>
#include <ft2build.h>
#include FT_FREETYPE_H

#include <algorithm>
#include <cstdint>
#include <filesystem>
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
constexpr int kFixedShift = 6;                     // FreeType metrics are 26.6 fixed point
constexpr float kMaxCoverage = 255.0f;

// One code point at the start of `text` and its length in bytes; a malformed or truncated sequence
// reads as U+FFFD of length 1, so that any label can be drawn.
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
  FT_Library library = nullptr;
  FT_Face face = nullptr;
  std::mutex mutex;  // an FT_Face is not thread-safe

  void set_size(int pixel_size) { FT_Set_Pixel_Sizes(face, 0, static_cast<FT_UInt>(std::max(1, pixel_size))); }

  // Calls visit(bitmap, pen_x, top) for each glyph: `pen_x` is the advance so far, the bitmap's
  // top-left is at (pen_x + left, -top) relative to the baseline origin. Returns the total advance.
  template <class Visit>
  int layout(std::string_view utf8, int pixel_size, Visit visit) {
    set_size(pixel_size);
    long pen = 0;  // 26.6
    FT_UInt previous = 0;
    const bool kerning = FT_HAS_KERNING(face);
    for (char32_t code : decode_utf8(utf8)) {
      const FT_UInt glyph = FT_Get_Char_Index(face, code);
      if (kerning && previous != 0 && glyph != 0) {
        FT_Vector delta{};
        FT_Get_Kerning(face, previous, glyph, FT_KERNING_DEFAULT, &delta);
        pen += delta.x;
      }
      if (FT_Load_Glyph(face, glyph, FT_LOAD_RENDER) == 0) {
        const FT_GlyphSlot slot = face->glyph;
        visit(slot->bitmap, static_cast<int>(pen >> kFixedShift) + slot->bitmap_left, slot->bitmap_top);
        pen += slot->advance.x;
      }
      previous = glyph;
    }
    return static_cast<int>((pen + (1 << (kFixedShift - 1))) >> kFixedShift);
  }
};

Font::Font() : impl_(new Impl) {
  const std::string path = find_font_file();
  if (FT_Init_FreeType(&impl_->library) != 0) {
    delete impl_;
    throw Error(ErrorCode::unsupported, "FreeType could not be initialised");
  }
  if (FT_New_Face(impl_->library, path.c_str(), 0, &impl_->face) != 0) {
    FT_Done_FreeType(impl_->library);
    delete impl_;
    throw Error(ErrorCode::format_error, "cannot load font " + path + " with FreeType; reinstall fonts-dejavu-core");
  }
}

Font::~Font() {
  FT_Done_Face(impl_->face);
  FT_Done_FreeType(impl_->library);
  delete impl_;
}

const Font& Font::standard() {
  static const Font font;
  return font;
}

TextSize Font::measure(std::string_view utf8, int pixel_size) const {
  const std::lock_guard lock(impl_->mutex);
  TextSize size;
  size.width = impl_->layout(utf8, pixel_size, [](const FT_Bitmap&, int, int) {});
  const FT_Size_Metrics& metrics = impl_->face->size->metrics;
  size.ascent = static_cast<int>((metrics.ascender + (1 << kFixedShift) - 1) >> kFixedShift);
  size.descent = static_cast<int>((-metrics.descender + (1 << kFixedShift) - 1) >> kFixedShift);
  return size;
}

int Font::draw(Image& image, int x, int y, std::string_view utf8, int pixel_size, Rgb color,
               Direction direction) const {
  const std::lock_guard lock(impl_->mutex);
  return impl_->layout(utf8, pixel_size, [&](const FT_Bitmap& bitmap, int left, int top) {
    for (unsigned row = 0; row < bitmap.rows; ++row) {
      const unsigned char* line = bitmap.buffer + static_cast<std::ptrdiff_t>(row) * bitmap.pitch;
      for (unsigned col = 0; col < bitmap.width; ++col) {
        if (line[col] == 0) continue;
        // (u, v): along the baseline and downwards from it, in unrotated text coordinates.
        const int u = left + static_cast<int>(col), v = static_cast<int>(row) - top;
        const float alpha = static_cast<float>(line[col]) / kMaxCoverage;
        // Rotating 90° counter-clockwise sends "along the baseline" up and "down" right.
        if (direction == Direction::horizontal) {
          image.blend(x + u, y + v, color, alpha);
        } else {
          image.blend(x + v, y - u, color, alpha);
        }
      }
    }
  });
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
