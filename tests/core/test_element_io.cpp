// Row loads and stores (src/core/element_io.hpp): a stored row holds each float rounded to the
// tensor's dtype exactly as the scalar conversions of attnkit/dtype.hpp round it, whether the row is
// contiguous (stored through the vectorised chunks) or strided (element by element), at any length.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "attnkit/dtype.hpp"
#include "attnkit/tensor.hpp"
#include "core/element_io.hpp"

namespace attnkit {
namespace {

// Floats that exercise the bf16 and f16 rounding: ties either way, values just off a tie, signed
// zeros, infinities, quiet and signalling NaNs of both signs, the largest finite float (rounds to
// inf in bf16), subnormals, then random bit patterns.
std::vector<float> hard_floats(std::size_t count) {
  std::vector<std::uint32_t> bits = {0x3F808000u, 0x3F818000u, 0x3F808001u, 0x3F817FFFu, 0x00000000u, 0x80000000u,
                                     0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00001u, 0x7F800001u, 0xFF800001u,
                                     0x7F7FFFFFu, 0x00000001u, 0x807FFFFFu, 0x477FF000u, 0x38800000u, 0x33800000u};
  std::mt19937 rng(7);
  while (bits.size() < count) bits.push_back(static_cast<std::uint32_t>(rng()));
  bits.resize(count);
  std::vector<float> out;
  for (std::uint32_t b : bits) out.push_back(std::bit_cast<float>(b));
  return out;
}

// The 16 bits the scalar conversion gives x in `dtype`.
std::uint16_t expected_bits(DType dtype, float x) {
  return dtype == DType::bf16 ? to_bfloat16(x).bits : to_float16(x).bits;
}

// Rows stored into a [1, 1, 2, count] tensor whose last dimension has stride `stride` (1: contiguous).
void expect_rows_round_like_scalars(DType dtype, std::int64_t count, std::int64_t stride) {
  const std::vector<float> row = hard_floats(static_cast<std::size_t>(count));
  std::vector<std::uint16_t> storage(static_cast<std::size_t>(2 * count * stride + 1), 0xABCDu);
  TensorView t(storage.data(), dtype, {1, 1, 2, count}, {0, 0, count * stride, stride});
  detail::store_row_part(row.data(), t, 0, 0, 1, 0, count);
  for (std::int64_t c = 0; c < count; ++c) {
    const std::uint16_t got = storage[static_cast<std::size_t>((count + c) * stride)];
    const float x = row[static_cast<std::size_t>(c)];
    if (std::isnan(x)) {  // a NaN stays a NaN of the same sign (its payload is the conversion's business)
      const bool nan = dtype == DType::bf16 ? std::isnan(to_float(bfloat16{got})) : std::isnan(to_float(float16{got}));
      EXPECT_TRUE(nan) << "element " << c;
      EXPECT_EQ(got & 0x8000u, expected_bits(dtype, x) & 0x8000u) << "element " << c;
    } else {
      EXPECT_EQ(got, expected_bits(dtype, x)) << "element " << c << " of " << count << ", bits " << std::hex
                                              << std::bit_cast<std::uint32_t>(x);
    }
  }
  // Row 0 and the gaps between strided elements are untouched.
  for (std::int64_t e = 0; e < 2 * count * stride + 1; ++e) {
    const bool written = e >= count * stride && e < 2 * count * stride && (e - count * stride) % stride == 0;
    if (!written) {
      EXPECT_EQ(storage[static_cast<std::size_t>(e)], 0xABCDu) << "element " << e;
    }
  }
}

TEST(ElementIo, Bf16RowsRoundLikeToBfloat16) {
  for (std::int64_t count : {1, 17, 255, 256, 257, 600})
    for (std::int64_t stride : {1, 3}) expect_rows_round_like_scalars(DType::bf16, count, stride);
}

TEST(ElementIo, F16RowsRoundLikeToFloat16) {
  for (std::int64_t count : {1, 17, 300})
    for (std::int64_t stride : {1, 2}) expect_rows_round_like_scalars(DType::f16, count, stride);
}

TEST(ElementIo, F32RowsAreCopiedExactlyAndRoundTrip) {
  for (std::int64_t stride : {1, 2}) {
    const std::int64_t count = 37;
    const std::vector<float> row = hard_floats(count);
    std::vector<float> storage(static_cast<std::size_t>(count * stride), -1.0f), back(count);
    TensorView t(storage.data(), DType::f32, {1, 1, 1, count}, {0, 0, 0, stride});
    detail::store_row_part(row.data(), t, 0, 0, 0, 0, count);
    detail::load_row_part(t, 0, 0, 0, 0, back.data(), count);
    for (std::int64_t c = 0; c < count; ++c) {
      EXPECT_EQ(std::bit_cast<std::uint32_t>(back[c]), std::bit_cast<std::uint32_t>(row[c])) << "element " << c;
      if (stride > 1) {
        EXPECT_EQ(storage[c * stride + 1], -1.0f);
      }
    }
  }
}

}  // namespace
}  // namespace attnkit
