// The 16-bit float conversions: exhaustive round trips and round-to-nearest-even against float64.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "attnkit/dtype.hpp"
#include "attnkit/tensor.hpp"

namespace attnkit {
namespace {

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::f64), 8u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::boolean), 1u);
  EXPECT_EQ(dtype_name(DType::bf16), "bf16");
  EXPECT_TRUE(is_floating(DType::f16));
  EXPECT_FALSE(is_floating(DType::i64));
}

// Every 16-bit pattern decodes to a float that encodes back to itself (NaNs stay NaN).
TEST(DType, EveryHalfAndBfloatPatternRoundTrips) {
  for (std::uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const float16 h{static_cast<std::uint16_t>(bits)};
    const float fh = to_float(h);
    if (std::isnan(fh)) {
      EXPECT_TRUE(std::isnan(to_float(to_float16(fh))));
    } else {
      EXPECT_EQ(to_float16(fh).bits, h.bits) << std::hex << bits;
    }
    const bfloat16 b{static_cast<std::uint16_t>(bits)};
    const float fb = to_float(b);
    if (std::isnan(fb)) {
      EXPECT_TRUE(std::isnan(to_float(to_bfloat16(fb))));
    } else {
      EXPECT_EQ(to_bfloat16(fb).bits, b.bits) << std::hex << bits;
    }
  }
}

// Decoded values, checked against the format definitions.
TEST(DType, DecodesKnownValues) {
  EXPECT_EQ(to_float(float16{0x3C00}), 1.0f);
  EXPECT_EQ(to_float(float16{0xC000}), -2.0f);
  EXPECT_EQ(to_float(float16{0x7BFF}), 65504.0f);                  // largest finite half
  EXPECT_EQ(to_float(float16{0x0001}), std::ldexp(1.0f, -24));    // smallest subnormal half
  EXPECT_EQ(to_float(float16{0x0400}), std::ldexp(1.0f, -14));    // smallest normal half
  EXPECT_EQ(to_float(float16{0x7C00}), std::numeric_limits<float>::infinity());
  EXPECT_EQ(to_float(bfloat16{0x3F80}), 1.0f);
  EXPECT_EQ(to_float(bfloat16{0x7F7F}), std::bit_cast<float>(0x7F7F0000u));
}

// Round to nearest, ties to even, checked by brute force: the encoded value must be the closest
// representable one, and on a tie the one with an even last bit.
template <class Half>
void expect_correct_rounding(float x) {
  const Half h = [&] {
    if constexpr (std::is_same_v<Half, float16>) {
      return to_float16(x);
    } else {
      return to_bfloat16(x);
    }
  }();
  const double chosen = to_float(h);
  if (std::isinf(chosen)) return;  // overflow handled in its own test
  const Half up{static_cast<std::uint16_t>(h.bits + 1)}, down{static_cast<std::uint16_t>(h.bits - 1)};
  for (const Half& other : {up, down}) {
    const double alt = to_float(other);
    if (std::isnan(alt) || (h.bits & 0x7FFF) == 0) continue;
    const double err_chosen = std::fabs(chosen - x), err_other = std::fabs(alt - x);
    ASSERT_LE(err_chosen, err_other) << x;
    if (err_chosen == err_other) {
      ASSERT_EQ(h.bits & 1, 0) << "tie not to even for " << x;
    }
  }
}

TEST(DType, RoundsToNearestEven) {
  std::uint32_t state = 12345;
  for (int i = 0; i < 200000; ++i) {
    state = state * 1664525u + 1013904223u;  // any bit pattern, so all exponents appear
    const float x = std::bit_cast<float>(state);
    if (!std::isfinite(x)) continue;
    if (std::fabs(x) < 65504.0f) expect_correct_rounding<float16>(x);
    expect_correct_rounding<bfloat16>(x);
  }
  // Exact ties.
  EXPECT_EQ(to_float16(1.0f + std::ldexp(1.0f, -11)).bits, 0x3C00);            // 1 + half an ulp -> 1 (even)
  EXPECT_EQ(to_float16(1.0f + 3 * std::ldexp(1.0f, -11)).bits, 0x3C02);        // -> even neighbour above
  EXPECT_EQ(to_bfloat16(std::bit_cast<float>(0x3F808000u)).bits, 0x3F80);     // tie -> even
  EXPECT_EQ(to_bfloat16(std::bit_cast<float>(0x3F818000u)).bits, 0x3F82);
  EXPECT_EQ(to_float16(std::ldexp(1.0f, -25)).bits, 0x0000);                   // half the smallest subnormal -> 0
  EXPECT_EQ(to_float16(std::ldexp(3.0f, -25)).bits, 0x0002);                   // 1.5 subnormal ulps -> 2
}

TEST(DType, OverflowNanAndSignedZero) {
  EXPECT_EQ(to_float16(65519.0f).bits, 0x7BFF);
  EXPECT_EQ(to_float16(65520.0f).bits, 0x7C00);
  EXPECT_EQ(to_float16(-1e9f).bits, 0xFC00);
  EXPECT_EQ(to_float16(-0.0f).bits, 0x8000);
  EXPECT_EQ(to_bfloat16(-0.0f).bits, 0x8000);
  EXPECT_TRUE(std::isnan(to_float(to_float16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isnan(to_float(to_bfloat16(std::numeric_limits<float>::signaling_NaN()))));
  EXPECT_EQ(to_bfloat16(std::numeric_limits<float>::max()).bits, 0x7F80);  // rounds up to inf
}

// store_from_double rounds a double straight to 16 bits, not through a rounded float: a double just
// above a bf16 tie must round up even though the nearest float is the tie itself.
TEST(DType, DoubleStoresRoundOnce) {
  const double just_above_tie = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40);
  bfloat16 b;
  store_from_double(&b.bits, DType::bf16, just_above_tie);
  EXPECT_EQ(b.bits, 0x3F81);
  float16 h;
  store_from_double(&h.bits, DType::f16, 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40));
  EXPECT_EQ(h.bits, 0x3C01);
  EXPECT_EQ(load_as_double(&b.bits, DType::bf16), static_cast<double>(to_float(b)));
}

}  // namespace
}  // namespace attnkit
