// The heatmap colour map, computed here rather than copied from a table.
//
// How it is made:
//  1. Five control colours chosen by hand in OKLCh (OKLab's lightness, chroma, hue), from a dark
//     blue-purple through blue and teal-green to yellow, the path viridis also takes.
//  2. Lightness L rises linearly with the curve parameter; the chromatic part (a, b) follows a
//     Catmull-Rom spline through the control colours, so hue and chroma change smoothly.
//  3. Colours outside sRGB are pulled towards grey at the same L (chroma bisected) until they fit,
//     so gamut clipping never breaks the lightness order.
//  4. The curve is resampled at equal OKLab arc length (ΔE steps), so equal steps of the value are
//     equal perceived steps of colour; 256 entries are kept, as 8-bit colour maps do.
// OKLab is Björn Ottosson's perceptual space (2020); its two 3×3 matrices define it.
#include "attnkit_viz/colormap.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <numbers>
#include <vector>

namespace attnkit::viz {

namespace {

struct Lab {
  double l, a, b;
};

struct LinearRgb {
  double r, g, b;
};

struct ControlPoint {
  double chroma, hue_degrees;
};

// The hand-chosen path; lightness runs linearly between kLightStart and kLightEnd.
constexpr double kLightStart = 0.27, kLightEnd = 0.92;
constexpr std::array<ControlPoint, 5> kControls{{
    {0.115, 305.0},  // blue-purple
    {0.095, 262.0},  // blue
    {0.095, 195.0},  // teal
    {0.150, 145.0},  // green
    {0.185, 105.0},  // yellow
}};
constexpr int kSegments = static_cast<int>(kControls.size()) - 1;
constexpr int kEntries = 256;        // colours in the final map
constexpr int kCurveSamples = 4096;  // samples of the spline used to measure its arc length
constexpr int kGamutBisections = 30;

LinearRgb oklab_to_linear_srgb(const Lab& c) {
  const double l = std::pow(c.l + 0.3963377774 * c.a + 0.2158037573 * c.b, 3.0);
  const double m = std::pow(c.l - 0.1055613458 * c.a - 0.0638541728 * c.b, 3.0);
  const double s = std::pow(c.l - 0.0894841775 * c.a - 1.2914855480 * c.b, 3.0);
  return {4.0767416621 * l - 3.3077115913 * m + 0.2309699292 * s,
          -1.2684380046 * l + 2.6097574011 * m - 0.3413193965 * s,
          -0.0041960863 * l - 0.7034186147 * m + 1.7076147010 * s};
}

bool in_gamut(const LinearRgb& c) {
  constexpr double kSlack = 1e-9;
  return c.r >= -kSlack && c.r <= 1 + kSlack && c.g >= -kSlack && c.g <= 1 + kSlack && c.b >= -kSlack &&
         c.b <= 1 + kSlack;
}

// sRGB transfer function (IEC 61966-2-1), then 8-bit rounding.
std::uint8_t encode_srgb(double linear) {
  linear = std::clamp(linear, 0.0, 1.0);
  const double encoded = linear <= 0.0031308 ? 12.92 * linear : 1.055 * std::pow(linear, 1.0 / 2.4) - 0.055;
  return static_cast<std::uint8_t>(std::lround(encoded * 255.0));
}

// Step 3: the colour at this L closest to (a, b) on the line towards grey that sRGB can show.
Lab into_gamut(const Lab& c) {
  if (in_gamut(oklab_to_linear_srgb(c))) return c;
  double low = 0.0, high = 1.0;  // fraction of the chroma kept
  for (int i = 0; i < kGamutBisections; ++i) {
    const double mid = (low + high) / 2;
    (in_gamut(oklab_to_linear_srgb({c.l, c.a * mid, c.b * mid})) ? low : high) = mid;
  }
  return {c.l, c.a * low, c.b * low};
}

// Step 2: the curve at parameter s in [0, 1].
Lab curve(double s) {
  auto ab = [](int i) {
    const ControlPoint& p = kControls[static_cast<std::size_t>(std::clamp(i, 0, kSegments))];
    const double h = p.hue_degrees * std::numbers::pi / 180.0;
    return std::array<double, 2>{p.chroma * std::cos(h), p.chroma * std::sin(h)};
  };
  const double x = std::clamp(s, 0.0, 1.0) * kSegments;
  const int i = std::min(static_cast<int>(x), kSegments - 1);
  const double u = x - i;
  // Catmull-Rom between control i and i+1 (ends repeat their control point).
  const auto p0 = ab(i - 1), p1 = ab(i), p2 = ab(i + 1), p3 = ab(i + 2);
  std::array<double, 2> out{};
  for (std::size_t k = 0; k < 2; ++k) {
    out[k] = 0.5 * (2 * p1[k] + (-p0[k] + p2[k]) * u + (2 * p0[k] - 5 * p1[k] + 4 * p2[k] - p3[k]) * u * u +
                    (-p0[k] + 3 * p1[k] - 3 * p2[k] + p3[k]) * u * u * u);
  }
  return into_gamut({kLightStart + (kLightEnd - kLightStart) * s, out[0], out[1]});
}

double distance(const Lab& x, const Lab& y) { return std::hypot(x.l - y.l, x.a - y.a, x.b - y.b); }

// Step 4: kEntries colours at equal arc length along the curve.
std::array<Rgb, kEntries> build_table() {
  std::vector<double> arc(kCurveSamples + 1, 0.0);
  Lab previous = curve(0.0);
  for (int i = 1; i <= kCurveSamples; ++i) {
    const Lab here = curve(static_cast<double>(i) / kCurveSamples);
    arc[static_cast<std::size_t>(i)] = arc[static_cast<std::size_t>(i - 1)] + distance(previous, here);
    previous = here;
  }
  std::array<Rgb, kEntries> table{};
  std::size_t j = 0;
  for (int e = 0; e < kEntries; ++e) {
    const double target = arc.back() * e / (kEntries - 1);
    while (j + 1 < arc.size() - 1 && arc[j + 1] < target) ++j;
    const double span = arc[j + 1] - arc[j];
    const double frac = span > 0 ? std::clamp((target - arc[j]) / span, 0.0, 1.0) : 0.0;
    const LinearRgb c = oklab_to_linear_srgb(curve((static_cast<double>(j) + frac) / kCurveSamples));
    table[static_cast<std::size_t>(e)] = {encode_srgb(c.r), encode_srgb(c.g), encode_srgb(c.b)};
  }
  return table;
}

}  // namespace

Rgb colormap(double t) {
  static const std::array<Rgb, kEntries> table = build_table();
  if (std::isnan(t)) return kGrey;
  const auto index = static_cast<std::size_t>(std::lround(std::clamp(t, 0.0, 1.0) * (kEntries - 1)));
  return table[index];
}

}  // namespace attnkit::viz
