// The drawing library attnkit_viz (lib/viz/): PNG round trips, PDF files, the
// colour map's lightness and endpoints (checked with CIE L*, a different formula from the OKLab it is
// built in), text staying inside its measured box, and clipping of lines and rectangles.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>

#include "attnkit/error.hpp"
#include "support/scratch_dir.hpp"
#include "attnkit_viz/canvas.hpp"
#include "attnkit_viz/colormap.hpp"
#include "attnkit_viz/picture_file.hpp"
#include "attnkit_viz/text.hpp"

namespace {

namespace fs = std::filesystem;
using attnkit::viz::Canvas;
using attnkit::viz::Rgb;
using attnkit::testing::ScratchDir;


// CIE 1976 L* of an 8-bit sRGB colour (D65): the sRGB decoding, luminance Y, then L*.
double cie_lightness(Rgb c) {
  auto linear = [](std::uint8_t v) {
    const double x = v / 255.0;
    return x <= 0.04045 ? x / 12.92 : std::pow((x + 0.055) / 1.055, 2.4);
  };
  const double y = 0.2126 * linear(c.r) + 0.7152 * linear(c.g) + 0.0722 * linear(c.b);
  return y > 216.0 / 24389.0 ? 116.0 * std::cbrt(y) - 16.0 : y * 24389.0 / 27.0;
}

int count_not(const Canvas& image, Rgb background) {
  int n = 0;
  for (const Rgb& p : image.pixels()) n += p == background ? 0 : 1;
  return n;
}

TEST(VizPng, RoundTripKeepsEveryPixelExactly) {
  Canvas image(7, 5);
  for (int y = 0; y < 5; ++y) {
    for (int x = 0; x < 7; ++x) {
      image.set(x, y, {static_cast<std::uint8_t>(x * 37), static_cast<std::uint8_t>(y * 51),
                       static_cast<std::uint8_t>((x * 7 + y * 11) % 256)});
    }
  }
  const ScratchDir scratch("attnkit_test_viz");
  const std::string path = scratch.file("round_trip.png");
  attnkit::viz::write_picture(image, path, attnkit::viz::PictureFormat::png);
  const Canvas back = attnkit::viz::read_png(path);
  ASSERT_EQ(back.width(), 7);
  ASSERT_EQ(back.height(), 5);
  EXPECT_EQ(back.pixels(), image.pixels());
}

TEST(VizPng, ErrorsNameThePath) {
  const ScratchDir scratch("attnkit_test_viz");
  const std::string missing = (fs::path(scratch.path()) / "no_such_dir" / "x.png").string();
  try {
    attnkit::viz::write_picture(Canvas(2, 2), missing, attnkit::viz::PictureFormat::png);
    FAIL() << "writing into a missing directory must fail";
  } catch (const attnkit::Error& e) {
    EXPECT_EQ(e.code(), attnkit::ErrorCode::io_error);
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
  }
  try {
    attnkit::viz::read_png(missing);
    FAIL() << "reading a missing file must fail";
  } catch (const attnkit::Error& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
  }
}

std::string file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(VizPictureFile, TheFormatFollowsTheExtension) {
  using attnkit::viz::PictureFormat, attnkit::viz::picture_format;
  EXPECT_EQ(picture_format("a.pdf"), PictureFormat::pdf);
  EXPECT_EQ(picture_format("a.Pdf"), PictureFormat::pdf);
  EXPECT_EQ(picture_format("a.png"), PictureFormat::png);
  EXPECT_EQ(picture_format("a"), PictureFormat::png);
  EXPECT_EQ(picture_format("svg"), PictureFormat::png);
  EXPECT_EQ(picture_format("a.svg.png"), PictureFormat::png);
  // SVG is refused, naming the file (Cairo 1.16's SVG backend leaks; see picture_file.hpp).
  for (const std::string path : {"a.svg", "dir/B.SVG"}) {
    try {
      picture_format(path);
      ADD_FAILURE() << path << " must be refused";
    } catch (const attnkit::Error& e) {
      EXPECT_EQ(e.code(), attnkit::ErrorCode::unsupported);
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(".pdf"), std::string::npos) << e.what();
    }
  }
}

// One drawing (a rectangle, a line, text, cells) written two ways: the PNG holds its pixels, the PDF
// is a vector file of the same size with the text's font in it.
TEST(VizPictureFile, OneCanvasAsPngAndPdf) {
  Canvas canvas(120, 80);
  canvas.fill_rect(10, 10, 30, 20, {200, 30, 40});
  canvas.line(0.0, 60.5, 120.0, 60.5, attnkit::viz::kBlack, 1.0);
  canvas.paint_cells(60, 10, 2, 2, 10, 10, {{255, 0, 0}, {0, 255, 0}, {0, 0, 255}, {9, 9, 9}});
  attnkit::viz::Font::standard().draw(canvas, 10, 75, "attention", 12, attnkit::viz::kBlack);
  const ScratchDir scratch("attnkit_test_viz");
  using attnkit::viz::PictureFormat;
  attnkit::viz::write_picture(canvas, scratch.file("c.png"), PictureFormat::png);
  attnkit::viz::write_picture(canvas, scratch.file("c.pdf"), PictureFormat::pdf);

  EXPECT_EQ(attnkit::viz::read_png(scratch.file("c.png")).pixels(), canvas.pixels());
  const std::string pdf = file_text(scratch.file("c.pdf"));
  EXPECT_EQ(pdf.substr(0, 5), "%PDF-");
  EXPECT_NE(pdf.find("/MediaBox [ 0 0 120 80 ]"), std::string::npos);
  EXPECT_NE(pdf.find("DejaVu"), std::string::npos);  // the text's font is embedded: text, not pixels

  // The cells are sharp: every pixel of a cell has its colour, up to its edge.
  EXPECT_EQ(canvas.at(60, 10), (Rgb{255, 0, 0}));
  EXPECT_EQ(canvas.at(69, 19), (Rgb{255, 0, 0}));
  EXPECT_EQ(canvas.at(70, 19), (Rgb{0, 255, 0}));
  EXPECT_EQ(canvas.at(60, 20), (Rgb{0, 0, 255}));
  EXPECT_EQ(canvas.at(79, 29), (Rgb{9, 9, 9}));
  EXPECT_EQ(canvas.at(80, 29), attnkit::viz::kWhite);

  // A missing folder is named, in every format.
  for (PictureFormat format : {PictureFormat::png, PictureFormat::pdf}) {
    const std::string missing = scratch.file("no_such_dir/x");
    try {
      attnkit::viz::write_picture(canvas, missing, format);
      ADD_FAILURE() << "writing into a missing directory must fail";
    } catch (const attnkit::Error& e) {
      EXPECT_EQ(e.code(), attnkit::ErrorCode::io_error);
      EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("No such file or directory"), std::string::npos) << e.what();
    }
  }
}

TEST(VizCanvas, SizesBeyondCairosLimitAreRefused) {
  EXPECT_NO_THROW(Canvas(0, 0));
  for (auto [w, h] : {std::pair{-1, 5}, std::pair{attnkit::viz::kMaxCanvasSide + 1, 5}}) {
    try {
      Canvas canvas(w, h);
      ADD_FAILURE() << w << " x " << h << " must be refused";
    } catch (const attnkit::Error& e) {
      EXPECT_EQ(e.code(), attnkit::ErrorCode::invalid_argument);
      EXPECT_NE(std::string(e.what()).find(std::to_string(w) + " x " + std::to_string(h)), std::string::npos) << e.what();
    }
  }
}

TEST(VizText, InvalidUtf8AndNulAreDrawnAsReplacementCharacters) {
  const auto& font = attnkit::viz::Font::standard();
  const std::string bad = std::string("a\xff") + '\0' + "b";
  const std::string replaced = "a\xEF\xBF\xBD\xEF\xBF\xBD" "b";
  EXPECT_EQ(font.measure(bad, 12).width, font.measure(replaced, 12).width);
  Canvas canvas(60, 20);
  EXPECT_EQ(font.draw(canvas, 2, 15, bad, 12, attnkit::viz::kBlack), font.measure(replaced, 12).width);
  // Drawing went on after the bad bytes: Cairo would stop at the first invalid string.
  Canvas after(60, 20);
  font.draw(after, 2, 15, replaced, 12, attnkit::viz::kBlack);
  EXPECT_EQ(canvas.pixels(), after.pixels());
}

TEST(VizColormap, LightnessRisesMonotonically) {
  constexpr int kSteps = 64;
  double previous = -1.0;
  for (int i = 0; i <= kSteps; ++i) {
    const double lightness = cie_lightness(attnkit::viz::colormap(static_cast<double>(i) / kSteps));
    EXPECT_GT(lightness, previous + 0.5) << "step " << i;  // each of 64 steps is a visible rise
    previous = lightness;
  }
}

TEST(VizColormap, EndpointsAreDarkBluePurpleAndLightYellow) {
  const Rgb low = attnkit::viz::colormap(0.0), high = attnkit::viz::colormap(1.0);
  EXPECT_LT(cie_lightness(low), 25.0);
  EXPECT_GT(low.b, low.g);  // blue-purple: blue and red over green
  EXPECT_GT(low.r, low.g);
  EXPECT_GT(cie_lightness(high), 85.0);
  EXPECT_GT(high.r, 200);  // yellow: red and green high, blue low
  EXPECT_GT(high.g, 200);
  EXPECT_LT(high.b, 100);
  const Rgb middle = attnkit::viz::colormap(0.5);  // teal: green and blue over red
  EXPECT_GT(middle.g, middle.r);
  EXPECT_GT(middle.b, middle.r);
}

TEST(VizColormap, ClampsAndShowsNaNAsGrey) {
  EXPECT_EQ(attnkit::viz::colormap(-3.0), attnkit::viz::colormap(0.0));
  EXPECT_EQ(attnkit::viz::colormap(7.0), attnkit::viz::colormap(1.0));
  EXPECT_EQ(attnkit::viz::colormap(std::nan("")), attnkit::viz::kGrey);
}

TEST(VizText, HorizontalTextStaysInItsMeasuredBox) {
  const auto& font = attnkit::viz::Font::standard();
  const std::string text = "Heatmap gÅ 123";
  const auto size = font.measure(text, 14);
  ASSERT_GT(size.width, 50);
  Canvas image(size.width + 40, 60);
  const int x = 20, y = 40;
  const int advance = font.draw(image, x, y, text, 14, attnkit::viz::kBlack);
  EXPECT_EQ(advance, size.width);
  EXPECT_GT(count_not(image, attnkit::viz::kWhite), 100);
  for (int py = 0; py < image.height(); ++py) {
    for (int px = 0; px < image.width(); ++px) {
      if (image.at(px, py) == attnkit::viz::kWhite) continue;
      EXPECT_TRUE(px >= x - 1 && px <= x + size.width + 1 && py >= y - size.ascent && py < y + size.descent)
          << "ink at (" << px << ", " << py << ")";
    }
  }
}

TEST(VizText, VerticalTextRunsUpwardsInTheRotatedBox) {
  const auto& font = attnkit::viz::Font::standard();
  const std::string text = "query tokens";
  const auto size = font.measure(text, 12);
  Canvas image(60, size.width + 40);
  const int x = 30, y = size.width + 20;
  font.draw(image, x, y, text, 12, attnkit::viz::kBlack, attnkit::viz::Direction::vertical_up);
  EXPECT_GT(count_not(image, attnkit::viz::kWhite), 80);
  for (int py = 0; py < image.height(); ++py) {
    for (int px = 0; px < image.width(); ++px) {
      if (image.at(px, py) == attnkit::viz::kWhite) continue;
      EXPECT_TRUE(px >= x - size.ascent && px < x + size.descent && py >= y - size.width - 1 && py <= y + 1)
          << "ink at (" << px << ", " << py << ")";
    }
  }
}

TEST(VizText, FitShortensWithAnEllipsis) {
  const auto& font = attnkit::viz::Font::standard();
  EXPECT_EQ(font.fit("cat", 12, 200), "cat");
  const std::string fitted = font.fit("a_very_long_token_label_indeed", 12, 60);
  EXPECT_LE(font.measure(fitted, 12).width, 60);
  EXPECT_EQ(fitted.substr(fitted.size() - 3), "\xE2\x80\xA6") << fitted;
  EXPECT_EQ(fitted.substr(0, 3), "a_v");
  EXPECT_EQ(font.fit("abc", 12, 1), "");  // not even "…" fits
}

TEST(VizImage, LinesAndRectanglesClipAtTheEdges) {
  Canvas image(20, 20);
  image.line(-100.0, 10.5, 100.0, 10.5, attnkit::viz::kBlack, 1.0);  // crosses the whole image
  for (int x = 0; x < 20; ++x) {
    EXPECT_EQ(image.at(x, 10), attnkit::viz::kBlack) << x;
    EXPECT_EQ(image.at(x, 5), attnkit::viz::kWhite) << x;
  }
  const auto drawn = image.pixels();
  image.line(-50.0, -50.0, -10.0, -5.0, attnkit::viz::kBlack, 3.0);  // wholly outside
  image.line(1e300, -1e300, -1e300, 1e300, attnkit::viz::kBlack, 0.0);  // zero width
  image.line(std::nan(""), 0.0, 5.0, 5.0, attnkit::viz::kBlack);
  EXPECT_EQ(image.pixels(), drawn);
  image.line(-1e300, 2.5, 1e300, 2.5, attnkit::viz::kBlack);  // huge but finite: clipped
  EXPECT_EQ(image.at(0, 2), attnkit::viz::kBlack);
  EXPECT_EQ(image.at(19, 2), attnkit::viz::kBlack);

  Canvas box(10, 10);
  box.fill_rect(-5, 8, 100, 100, {1, 2, 3});
  EXPECT_EQ(box.at(0, 9), (Rgb{1, 2, 3}));
  EXPECT_EQ(box.at(9, 8), (Rgb{1, 2, 3}));
  EXPECT_EQ(box.at(9, 7), attnkit::viz::kWhite);
  EXPECT_EQ(count_not(box, attnkit::viz::kWhite), 20);
}

TEST(VizImage, DashedLinesLeaveGaps) {
  Canvas image(40, 5);
  image.line(0.0, 2.5, 40.0, 2.5, attnkit::viz::kBlack, 1.0, 5.0);
  EXPECT_EQ(image.at(2, 2), attnkit::viz::kBlack);   // first dash: 0..5
  EXPECT_EQ(image.at(7, 2), attnkit::viz::kWhite);   // gap: 5..10
  EXPECT_EQ(image.at(12, 2), attnkit::viz::kBlack);  // second dash
}

}  // namespace
