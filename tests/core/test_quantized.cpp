// The quantized row formats (attnkit/quantized.hpp): byte layout on hand-made rows, rounding to
// nearest even, NaN and overflowing blocks, zero blocks, and the error bound on random rows.
#include <gtest/gtest.h>

#include <attnkit/attnkit.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "support/quantisation.hpp"

namespace attnkit {
namespace {

constexpr DType kQuantizedDtypes[] = {DType::int8, DType::int4, DType::fp8_e4m3, DType::fp8_e5m2};

std::vector<std::byte> quantized(const std::vector<float>& x, DType dtype) {
  std::vector<std::byte> row(static_cast<std::size_t>(quantized_row_bytes(dtype, static_cast<std::int64_t>(x.size()))),
                             std::byte{0xEE});
  quantize_row(x.data(), static_cast<std::int64_t>(x.size()), dtype, row.data());
  return row;
}

std::vector<double> read_back(const std::vector<std::byte>& row, std::int64_t width, DType dtype) {
  std::vector<double> out(static_cast<std::size_t>(width));
  dequantize_row(row.data(), width, dtype, 0, width, out.data());
  return out;
}

std::uint16_t u16_at(const std::vector<std::byte>& row, std::size_t offset) {
  std::uint16_t x;
  std::memcpy(&x, row.data() + offset, sizeof x);
  return x;
}

TEST(QuantizedRows, SizesAndWhichDtypesAreQuantized) {
  EXPECT_EQ(quantized_row_bytes(DType::int8, 128), 128 + 2 * 4);
  EXPECT_EQ(quantized_row_bytes(DType::int4, 128), 64 + 4 * 4);
  EXPECT_EQ(quantized_row_bytes(DType::int8, 32), 34);
  EXPECT_EQ(quantized_row_bytes(DType::fp8_e4m3, 128), 128 + 2 * 4);
  EXPECT_EQ(quantized_row_bytes(DType::fp8_e5m2, 64), 64 + 2 * 2);
  for (DType d : kQuantizedDtypes) EXPECT_TRUE(is_quantized(d)) << dtype_name(d);
  for (DType d : {DType::f32, DType::f16, DType::bf16, DType::f64, DType::boolean, DType::i32, DType::i64}) {
    EXPECT_FALSE(is_quantized(d)) << dtype_name(d);
  }
  EXPECT_EQ(dtype_name(DType::int8), "int8");
  EXPECT_EQ(dtype_name(DType::int4), "int4");
  EXPECT_EQ(dtype_name(DType::fp8_e4m3), "fp8_e4m3");
  EXPECT_EQ(dtype_name(DType::fp8_e5m2), "fp8_e5m2");
}

// The OCP formats' codes, by their definition: E4M3 (bias 7, no infinities, NaN at S.1111.111) and
// E5M2 (bias 15, IEEE-like). A block whose largest magnitude is the format's largest has scale 1, so
// the stored codes are the values' own, and each reads back as written here.
TEST(QuantizedRows, Fp8CodesAreTheOcpFormatsAndRoundToNearestEven) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  struct Code {
    DType dtype;
    std::uint8_t code;
    double value;
  };
  const Code codes[] = {
      {DType::fp8_e4m3, 0x00, 0.0},     {DType::fp8_e4m3, 0x01, 0x1p-9},  {DType::fp8_e4m3, 0x07, 7 * 0x1p-9},
      {DType::fp8_e4m3, 0x08, 0x1p-6},  {DType::fp8_e4m3, 0x38, 1.0},     {DType::fp8_e4m3, 0x3C, 1.5},
      {DType::fp8_e4m3, 0x7E, 448.0},   {DType::fp8_e4m3, 0x7F, nan},     {DType::fp8_e4m3, 0xFF, nan},
      {DType::fp8_e4m3, 0xB8, -1.0},    {DType::fp8_e4m3, 0x78, 256.0},   {DType::fp8_e5m2, 0x01, 0x1p-16},
      {DType::fp8_e5m2, 0x04, 0x1p-14}, {DType::fp8_e5m2, 0x3C, 1.0},     {DType::fp8_e5m2, 0x3E, 1.5},
      {DType::fp8_e5m2, 0x7B, 57344.0}, {DType::fp8_e5m2, 0x7C, inf},     {DType::fp8_e5m2, 0xFC, -inf},
      {DType::fp8_e5m2, 0x7D, nan},     {DType::fp8_e5m2, 0xC0, -2.0},
  };
  for (const Code& c : codes) {
    SCOPED_TRACE(std::string(dtype_name(c.dtype)) + " code " + std::to_string(c.code));
    // A row of the code, scale 1 (float16 0x3C00).
    std::vector<std::byte> row(34, std::byte{c.code});
    const std::uint16_t one = 0x3C00;
    std::memcpy(row.data() + 32, &one, 2);
    const std::vector<double> back = read_back(row, 32, c.dtype);
    if (std::isnan(c.value)) EXPECT_TRUE(std::isnan(back[0])) << back[0];
    else EXPECT_EQ(back[0], c.value);
    float as_float = 0;
    dequantize_row(row.data(), 32, c.dtype, 0, 1, &as_float);
    if (std::isnan(c.value)) EXPECT_TRUE(std::isnan(as_float));
    else EXPECT_EQ(as_float, static_cast<float>(c.value));
  }
  // Quantising: the largest magnitude is the format's largest, so scale 1 and the codes are the
  // values' nearest, ties to the even code.
  for (DType dtype : {DType::fp8_e4m3, DType::fp8_e5m2}) {
    SCOPED_TRACE(dtype_name(dtype));
    const bool e4m3 = dtype == DType::fp8_e4m3;
    std::vector<float> x(32, 0.0f);
    x[0] = e4m3 ? 448.0f : 57344.0f;
    x[1] = e4m3 ? 1.0625f : 1.125f;   // halfway between 1 and the next code: to 1 (even)
    x[2] = e4m3 ? 1.1875f : 1.375f;   // halfway between the first and second codes above 1: to the second (even)
    x[3] = e4m3 ? 0x1.8p-9f : 0x1.8p-16f;  // halfway between the two smallest subnormals: to the second
    x[4] = -1.0f;
    x[5] = e4m3 ? 0x1p-10f : 0x1p-17f;  // half the smallest subnormal: a tie, to zero
    const std::vector<std::byte> row = quantized(x, dtype);
    EXPECT_EQ(u16_at(row, 32), to_float16(1.0f).bits) << "the scale";
    const std::uint8_t want[] = {static_cast<std::uint8_t>(e4m3 ? 0x7E : 0x7B), static_cast<std::uint8_t>(e4m3 ? 0x38 : 0x3C),
                                 static_cast<std::uint8_t>(e4m3 ? 0x3A : 0x3E), 0x02, static_cast<std::uint8_t>(e4m3 ? 0xB8 : 0xBC),
                                 0x00};
    for (std::size_t i = 0; i < std::size(want); ++i) EXPECT_EQ(static_cast<std::uint8_t>(row[i]), want[i]) << "code " << i;
  }
}

// The scale is a power of two: the smallest that brings the block's largest magnitude within the
// format's largest value, 2^-24 at least; x / scale is then exact.
TEST(QuantizedRows, Fp8ScalesArePowersOfTwo) {
  struct Case {
    DType dtype;
    float largest, scale;
  };
  for (const Case& c : {Case{DType::fp8_e4m3, 1.0f, 0x1p-8f}, Case{DType::fp8_e4m3, 448.0f, 1.0f}, Case{DType::fp8_e4m3, 449.0f, 2.0f},
                        Case{DType::fp8_e4m3, 1e-9f, 0x1p-24f}, Case{DType::fp8_e5m2, 1.0f, 0x1p-15f},
                        Case{DType::fp8_e5m2, 57345.0f, 2.0f}, Case{DType::fp8_e4m3, 0.0f, 0x1p-24f}}) {
    SCOPED_TRACE(std::string(dtype_name(c.dtype)) + ", largest " + std::to_string(c.largest));
    std::vector<float> x(32, 0.0f);
    x[7] = -c.largest;
    x[8] = c.largest / 3;
    const std::vector<std::byte> row = quantized(x, c.dtype);
    EXPECT_EQ(u16_at(row, 32), to_float16(c.scale).bits);
  }
}

// A block whose largest magnitude is 127 has scale 1: the codes are the values rounded to nearest,
// ties to even, and the bytes are exactly these.
TEST(QuantizedRows, Int8LayoutAndTiesToEven) {
  std::vector<float> x(64, 0.0f);
  x[0] = 127, x[1] = -127, x[2] = 2.5f, x[3] = 3.5f, x[4] = -2.5f, x[5] = 0.49f, x[6] = -0.5f;
  for (int i = 32; i < 64; ++i) x[static_cast<std::size_t>(i)] = 0.25f * static_cast<float>(i - 48);  // second block: −4 … 3.75
  const std::vector<std::byte> row = quantized(x, DType::int8);
  const std::int8_t want[] = {127, -127, 2, 4, -2, 0, 0};
  for (std::size_t i = 0; i < std::size(want); ++i) EXPECT_EQ(static_cast<std::int8_t>(row[i]), want[i]) << "code " << i;
  EXPECT_EQ(u16_at(row, 64), to_float16(1.0f).bits) << "the first block's scale";
  const double scale2 = to_float(to_float16(4.0f / 127));  // the second block's: max |x| / 127 in float16
  EXPECT_EQ(u16_at(row, 66), to_float16(4.0f / 127).bits);
  const std::vector<double> back = read_back(row, 64, DType::int8);
  EXPECT_EQ(back[0], 127.0);
  EXPECT_EQ(back[3], 4.0);
  for (int i = 32; i < 64; ++i) {
    const auto k = static_cast<std::size_t>(i);
    EXPECT_EQ(back[k], static_cast<std::int8_t>(row[k]) * scale2);
    EXPECT_LE(std::fabs(back[k] - x[k]), scale2 / 2 * (1 + 1e-6)) << "value " << i;
  }
}

// A block of the values 0 … 15 (twice) has offset 0 and scale 1: codes are the values, byte i holds
// those of values i (low nibble) and i + 16 (high nibble).
TEST(QuantizedRows, Int4LayoutAndTiesToEven) {
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[static_cast<std::size_t>(i)] = static_cast<float>((i * 7) % 16);
  x[5] = 0.5f, x[6] = 1.5f, x[7] = 14.5f;  // ties: to 0, 2 and 14
  x[0] = 0, x[1] = 15;                     // keep the range 0 … 15
  const std::vector<std::byte> row = quantized(x, DType::int4);
  ASSERT_EQ(row.size(), 20u);
  std::vector<int> codes(32);
  for (int i = 0; i < 16; ++i) {
    const auto byte = static_cast<std::uint8_t>(row[static_cast<std::size_t>(i)]);
    codes[static_cast<std::size_t>(i)] = byte & 0xF;
    codes[static_cast<std::size_t>(i + 16)] = byte >> 4;
  }
  for (int i = 0; i < 32; ++i) {
    const float v = x[static_cast<std::size_t>(i)];
    const int want = i == 5 ? 0 : i == 6 ? 2 : i == 7 ? 14 : static_cast<int>(v);
    EXPECT_EQ(codes[static_cast<std::size_t>(i)], want) << "code " << i;
  }
  EXPECT_EQ(u16_at(row, 16), to_float16(1.0f).bits) << "scale";
  EXPECT_EQ(u16_at(row, 18), to_float16(0.0f).bits) << "offset";
  const std::vector<double> back = read_back(row, 32, DType::int4);
  EXPECT_EQ(back[1], 15.0);
  EXPECT_EQ(back[7], 14.0);
}

TEST(QuantizedRows, NonFiniteAndOverflowingBlocksReadBackAsNaNAndOtherBlocksAreUntouched) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (DType dtype : kQuantizedDtypes)
    for (float bad : {nan, inf, -inf, dtype == DType::fp8_e4m3 ? 2e7f : dtype == DType::fp8_e5m2 ? 4e9f : 1e7f, -3e9f}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " with " + std::to_string(bad));
      std::vector<float> x(96);
      for (int i = 0; i < 96; ++i) x[static_cast<std::size_t>(i)] = 0.1f * static_cast<float>(i % 13) - 0.4f;
      const std::vector<double> clean = read_back(quantized(x, dtype), 96, dtype);
      x[40] = bad;  // the second block
      const std::vector<double> back = read_back(quantized(x, dtype), 96, dtype);
      for (int i = 0; i < 96; ++i) {
        if (i >= 32 && i < 64) {
          EXPECT_TRUE(std::isnan(back[static_cast<std::size_t>(i)])) << "value " << i;
        } else {
          EXPECT_EQ(back[static_cast<std::size_t>(i)], clean[static_cast<std::size_t>(i)]) << "value " << i;
        }
      }
    }
}

// Zeros read back exactly; so does a constant block of int4 (scale 0, the value its offset).
TEST(QuantizedRows, ZeroAndConstantBlocksReadBackExactly) {
  for (DType dtype : kQuantizedDtypes) {
    std::vector<float> x(64, 0.0f);
    if (dtype == DType::int4)
      for (int i = 32; i < 64; ++i) x[static_cast<std::size_t>(i)] = -3.25f;  // exact in float16
    const std::vector<double> back = read_back(quantized(x, dtype), 64, dtype);
    for (int i = 0; i < 64; ++i) EXPECT_EQ(back[static_cast<std::size_t>(i)], x[static_cast<std::size_t>(i)]) << dtype_name(dtype) << " " << i;
  }
}

// On random rows (normal, with a few channels 20× larger) every value is within half a step of its
// block (plus the float16 rounding of int4's offset), and the float32 read-back is the exact value
// rounded once.
TEST(QuantizedRows, EveryValueIsWithinHalfAStepAndFloatReadsRoundTheExactValue) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (DType dtype : kQuantizedDtypes)
    for (int trial = 0; trial < 200; ++trial) {
      const std::int64_t width = kQuantBlock * (1 + trial % 4);
      std::vector<float> x(static_cast<std::size_t>(width));
      for (std::int64_t c = 0; c < width; ++c) x[static_cast<std::size_t>(c)] = normal(rng) * (c % 17 == 3 ? 20.0f : 1.0f);
      const std::vector<std::byte> row = quantized(x, dtype);
      const std::vector<double> back = read_back(row, width, dtype);
      std::vector<float> as_float(static_cast<std::size_t>(width));
      dequantize_row(row.data(), width, dtype, 0, width, as_float.data());
      const std::vector<double> exact(x.begin(), x.end());
      for (std::int64_t b = 0; b < width / kQuantBlock; ++b) {
        for (std::int64_t i = 0; i < kQuantBlock; ++i) {
          const double bound = testing::quantisation_bound(dtype, exact.data() + b * kQuantBlock, i);
          const auto k = static_cast<std::size_t>(b * kQuantBlock + i);
          ASSERT_LE(std::fabs(back[k] - x[k]), bound) << dtype_name(dtype) << " trial " << trial << " value " << k;
          ASSERT_EQ(as_float[k], static_cast<float>(back[k]));
        }
      }
      // A part of the row reads the same values as the whole.
      std::vector<double> part(static_cast<std::size_t>(width - 5));
      dequantize_row(row.data(), width, dtype, 5, width - 5, part.data());
      for (std::int64_t c = 5; c < width; ++c) ASSERT_EQ(part[static_cast<std::size_t>(c - 5)], back[static_cast<std::size_t>(c)]);
    }
}

// ---- groups of rows quantised per channel (quantize_channel_group) ----

// kChannelGroup records of `width` values from x[r · width + c], each record's bytes prefilled with
// 0xEE so that a byte the quantiser forgets shows.
struct ChannelGroup {
  std::vector<std::vector<std::byte>> records;
  std::vector<std::byte*> rows;
  ChannelGroup(const std::vector<float>& x, std::int64_t width, DType dtype) {
    for (std::int64_t r = 0; r < kChannelGroup; ++r)
      records.emplace_back(static_cast<std::size_t>(quantized_row_bytes(dtype, width)), std::byte{0xEE});
    for (auto& record : records) rows.push_back(record.data());
    quantize_channel_group(x.data(), width, dtype, rows.data());
  }
  const std::byte* const* view() const { return rows.data(); }
  std::vector<double> row(std::int64_t r, std::int64_t width, DType dtype) const {
    std::vector<double> out(static_cast<std::size_t>(width));
    dequantize_channel_group_row(view(), r, width, dtype, 0, width, out.data());
    return out;
  }
};

// Channel c's parameters lie in record c / (width/32), at its parameter entry c mod (width/32); the
// codes where a row record has them. Channel 37 of width 64 (entry 1 of record 18) holds r · 0.5 −
// 3 over the group's rows: int8 scale 12.5 / 127, int4 offset −3 and scale 15.5 / 15.
TEST(ChannelGroups, LayoutOfParametersAndCodes) {
  const std::int64_t width = 64;
  std::vector<float> x(static_cast<std::size_t>(kChannelGroup * width), 0.0f);
  for (std::int64_t r = 0; r < kChannelGroup; ++r) x[static_cast<std::size_t>(r * width + 37)] = 0.5f * static_cast<float>(r) - 3.0f;
  for (DType dtype : {DType::int8, DType::int4}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    const ChannelGroup group(x, width, dtype);
    const std::vector<std::byte>& holder = group.records[18];
    const std::size_t at = static_cast<std::size_t>(quantized_block_params_at(dtype, width, 1));
    if (dtype == DType::int8) {
      const float16 scale = to_float16(static_cast<float>(12.5 / 127));
      EXPECT_EQ(u16_at(holder, at), scale.bits);
      for (std::int64_t r = 0; r < kChannelGroup; ++r) {
        const double value = 0.5 * static_cast<double>(r) - 3.0;
        EXPECT_EQ(static_cast<std::int8_t>(group.records[static_cast<std::size_t>(r)][37]),
                  static_cast<std::int8_t>(std::nearbyint(value / to_float(scale))))
            << "row " << r;
      }
    } else {
      EXPECT_EQ(u16_at(holder, at + 2), to_float16(-3.0f).bits) << "offset";
      EXPECT_EQ(u16_at(holder, at), to_float16(15.5f / 15).bits) << "scale";
      for (std::int64_t r = 0; r < kChannelGroup; ++r) {
        // feature 37 is value 5 of block 1, the low nibble of the block's byte 5: byte 16 + 5
        const auto byte = static_cast<std::uint8_t>(group.records[static_cast<std::size_t>(r)][21]);
        const double step = to_float(to_float16(15.5f / 15));
        EXPECT_EQ(byte & 0xF, static_cast<int>(std::nearbyint((0.5 * static_cast<double>(r) - 3.0 + 3.0) / step))) << "row " << r;
        EXPECT_EQ(byte >> 4, 0) << "feature 53 of row " << r << " is 0, the channel's offset";
      }
    }
    // The other channels are all zeros: scale 0, and read back exactly.
    for (std::int64_t r = 0; r < kChannelGroup; ++r) {
      const std::vector<double> back = group.row(r, width, dtype);
      for (std::int64_t c = 0; c < width; ++c) {
        if (c != 37) {
          ASSERT_EQ(back[static_cast<std::size_t>(c)], 0.0) << "row " << r << ", channel " << c;
        }
      }
    }
  }
}

// On random groups whose channels differ in size by 20× (as keys' do), every value is within half a
// step of its channel over the group, whatever the other channels hold; the float32 read-back is
// the exact value rounded once; a part of a row reads as the whole does.
TEST(ChannelGroups, EveryValueIsWithinHalfItsChannelsStepAndFloatReadsRoundTheExactValue) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  for (DType dtype : {DType::int8, DType::int4})
    for (int trial = 0; trial < 40; ++trial) {
      const std::int64_t width = kQuantBlock * (1 + trial % 4);
      std::vector<float> x(static_cast<std::size_t>(kChannelGroup * width));
      for (std::size_t i = 0; i < x.size(); ++i) {
        const std::int64_t c = static_cast<std::int64_t>(i) % width;
        x[i] = normal(rng) * (c % 17 == 3 ? 20.0f : 1.0f) + (c % 5 == 1 ? 3.0f : 0.0f);
      }
      const ChannelGroup group(x, width, dtype);
      for (std::int64_t c = 0; c < width; ++c) {
        std::vector<double> channel(static_cast<std::size_t>(kChannelGroup));
        for (std::int64_t r = 0; r < kChannelGroup; ++r) channel[static_cast<std::size_t>(r)] = x[static_cast<std::size_t>(r * width + c)];
        for (std::int64_t r = 0; r < kChannelGroup; ++r) {
          double back = 0;
          float as_float = 0;
          dequantize_channel_group_row(group.view(), r, width, dtype, c, 1, &back);
          dequantize_channel_group_row(group.view(), r, width, dtype, c, 1, &as_float);
          ASSERT_LE(std::fabs(back - channel[static_cast<std::size_t>(r)]), testing::quantisation_bound(dtype, channel.data(), r))
              << dtype_name(dtype) << " trial " << trial << " row " << r << " channel " << c;
          ASSERT_EQ(as_float, static_cast<float>(back));
          ASSERT_EQ(group.row(r, width, dtype)[static_cast<std::size_t>(c)], back);
        }
      }
      std::vector<float> scale(static_cast<std::size_t>(width)), offset(static_cast<std::size_t>(width), -1.0f);
      channel_group_params(group.view(), width, dtype, scale.data(), offset.data());
      for (std::int64_t c = 0; c < width; ++c) {  // value = offset + code · scale, from the parameters read
        const auto k = static_cast<std::size_t>(c);
        const double back = group.row(3, width, dtype)[k];
        if (dtype == DType::int8) {
          EXPECT_EQ(back, static_cast<std::int8_t>(group.records[3][k]) * static_cast<double>(scale[k]));
          EXPECT_EQ(offset[k], -1.0f) << "int8 has no offsets";
        } else {
          EXPECT_EQ(std::fmod(back - offset[k], static_cast<double>(scale[k])), 0.0) << "channel " << c;
        }
      }
    }
}

// A channel holding NaN or ±inf reads back as NaN in every row of the group; the other channels are
// as they would be without it.
TEST(ChannelGroups, ANonFiniteChannelReadsBackAsNaNAndTheOthersAreUntouched) {
  const float bads[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(), -3e9f};
  for (DType dtype : {DType::int8, DType::int4})
    for (float bad : bads) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " with " + std::to_string(bad));
      const std::int64_t width = 64;
      std::vector<float> x(static_cast<std::size_t>(kChannelGroup * width));
      for (std::size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * static_cast<float>(i % 13) - 0.4f;
      const ChannelGroup clean(x, width, dtype);
      x[static_cast<std::size_t>(9 * width + 40)] = bad;  // channel 40, row 9
      const ChannelGroup group(x, width, dtype);
      for (std::int64_t r = 0; r < kChannelGroup; ++r) {
        const std::vector<double> got = group.row(r, width, dtype), want = clean.row(r, width, dtype);
        for (std::int64_t c = 0; c < width; ++c) {
          const auto k = static_cast<std::size_t>(c);
          if (c == 40) {
            EXPECT_TRUE(std::isnan(got[k])) << "row " << r;
          } else {
            EXPECT_EQ(got[k], want[k]) << "row " << r << ", channel " << c;
          }
        }
      }
    }
}

TEST(QuantizedRows, QuantizedDtypesAreNotElementTypes) {
  // As q (or any tensor attention reads), in a file, or converted: a clear error naming the argument.
  std::vector<std::int8_t> bytes(4 * 32);
  const ConstTensorView q8 = ConstTensorView::contiguous(bytes.data(), DType::int8, {1, 1, 4, 32});
  Tensor k(DType::f32, {1, 1, 4, 32}), v(DType::f32, {1, 1, 4, 32}), out(DType::f32, {1, 1, 4, 32});
  try {
    forward(q8, k.view(), v.view(), out.view());
    ADD_FAILURE() << "int8 q was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_dtype);
    EXPECT_NE(std::string(e.what()).find("q"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Tensor::converted(q8, DType::f32), Error);
  Tensor t(DType::int4, {2, 8});
  try {
    write_npy("/nonexistent-dir/x.npy", t);
    ADD_FAILURE() << "an int4 tensor was written";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_dtype) << e.what();
  }
}

}  // namespace
}  // namespace attnkit
