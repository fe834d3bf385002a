// The int8, int4 and fp8 row formats of attnkit/quantized.hpp, and int8 and int4 groups of rows
// quantised per channel: quantising on append, reading back for the reference and for the kernels'
// converted rows. Plain loops: a cache row is quantised once.
#include "attnkit/quantized.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/fp8.hpp"

namespace attnkit {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
static_assert(kChannelGroup == kQuantBlock, "a channel's group is quantised as a row's block is");

std::uint16_t load_u16(const std::byte* p) {
  std::uint16_t x;
  std::memcpy(&x, p, sizeof x);
  return x;  // the formats are little-endian, as every target attnkit runs on
}
void store_u16(std::byte* p, std::uint16_t x) { std::memcpy(p, &x, sizeof x); }

// x rounded to float16, or nullopt-like NaN bits when it does not fit (the block becomes NaN).
float16 half_or_nan(double x) {
  const float16 h = to_float16(static_cast<float>(x));
  return std::isfinite(to_float(h)) ? h : to_float16(std::numeric_limits<float>::quiet_NaN());
}

// Nearest integer, ties to even (the default rounding mode; std::nearbyint honours it).
double nearest_even(double x) { return std::nearbyint(x); }

// int8's float16 scale of values x[0 .. kQuantBlock), every stride-th: max|x| / 127, NaN if one is
// not finite or the scale overflows.
float16 int8_scale(const float* x, std::int64_t stride) {
  double largest = 0;
  bool finite = true;
  for (std::int64_t i = 0; i < kQuantBlock; ++i) {
    finite = finite && std::isfinite(x[i * stride]);
    largest = std::max(largest, std::fabs(static_cast<double>(x[i * stride])));
  }
  return finite ? half_or_nan(largest / 127) : to_float16(std::numeric_limits<float>::quiet_NaN());
}
std::byte int8_code(float x, double s) {
  const double code = s > 0 ? std::clamp(nearest_even(x / s), -127.0, 127.0) : 0.0;  // 0 when s is 0 or NaN
  return static_cast<std::byte>(static_cast<std::int8_t>(code));
}

// int4's float16 scale and offset of values x[0 .. kQuantBlock), every stride-th: offset the
// minimum, scale (max − offset) / 15; NaN if one is not finite or either overflows.
void int4_params(const float* x, std::int64_t stride, float16& scale, float16& offset) {
  double low = 0, high = 0;
  bool finite = true;
  for (std::int64_t i = 0; i < kQuantBlock; ++i) {
    const double v = x[i * stride];
    finite = finite && std::isfinite(v);
    low = i == 0 ? v : std::min(low, v);
    high = i == 0 ? v : std::max(high, v);
  }
  const float16 nan = to_float16(std::numeric_limits<float>::quiet_NaN());
  scale = nan, offset = nan;
  if (finite) {
    offset = half_or_nan(low);
    // From the rounded offset, so that the largest value still maps into 0 … 15.
    scale = half_or_nan((high - to_float(offset)) / 15);
    if (!std::isfinite(to_float(offset))) scale = nan;
  }
}
std::uint8_t int4_code(float x, double s, double o) {
  return static_cast<std::uint8_t>(s > 0 ? std::clamp(nearest_even((x - o) / s), 0.0, 15.0) : 0.0);
}
// Byte of a row record holding feature c's 4-bit code, and whether in its high nibble: byte i of a
// block's kQuantBlock / 2 holds the codes of its values i (low) and i + kQuantBlock / 2 (high).
std::int64_t int4_byte(std::int64_t c) { return c / kQuantBlock * (kQuantBlock / 2) + c % (kQuantBlock / 2); }
bool int4_high(std::int64_t c) { return c % kQuantBlock >= kQuantBlock / 2; }

void quantize_int8_block(const float* x, std::byte* codes, std::byte* scale_at) {
  const float16 scale = int8_scale(x, 1);
  for (std::int64_t i = 0; i < kQuantBlock; ++i) codes[i] = int8_code(x[i], to_float(scale));
  store_u16(scale_at, scale.bits);
}

void quantize_int4_block(const float* x, std::byte* codes, std::byte* scale_at) {
  float16 scale, offset;
  int4_params(x, 1, scale, offset);
  const double s = to_float(scale), o = to_float(offset);
  for (std::int64_t i = 0; i < kQuantBlock / 2; ++i) {
    codes[i] = static_cast<std::byte>(int4_code(x[i], s, o) | (int4_code(x[i + kQuantBlock / 2], s, o) << 4));
  }
  store_u16(scale_at, scale.bits);
  store_u16(scale_at + 2, offset.bits);
}

// The smallest power of two s >= 2^-24 with largest / s within the format's largest value, so that
// x / s is exact; NaN if the block is not finite or s passes float16's range.
void quantize_fp8_block(DType dtype, const float* x, std::byte* codes, std::byte* scale_at) {
  double largest = 0;
  bool finite = true;
  for (std::int64_t i = 0; i < kQuantBlock; ++i) {
    finite = finite && std::isfinite(x[i]);
    largest = std::max(largest, std::fabs(static_cast<double>(x[i])));
  }
  const double format_largest = detail::fp8_format(dtype).largest;
  int exponent = -24;  // float16's smallest subnormal, 2^-24; then up to the smallest that holds the block
  while (finite && largest > format_largest * std::ldexp(1.0, exponent)) ++exponent;
  const float16 scale = finite ? half_or_nan(std::ldexp(1.0, exponent)) : to_float16(std::numeric_limits<float>::quiet_NaN());
  const double s = to_float(scale);
  for (std::int64_t i = 0; i < kQuantBlock; ++i) {
    const std::uint8_t code = std::isfinite(s) ? detail::fp8_nearest(dtype, x[i] / s) : 0;  // 0 when NaN
    codes[i] = static_cast<std::byte>(code);
  }
  store_u16(scale_at, scale.bits);
}

// Feature c's 4-bit code in a row record.
int int4_code_at(const std::byte* row, std::int64_t c) {
  const auto byte = static_cast<std::uint8_t>(row[int4_byte(c)]);
  return int4_high(c) ? byte >> 4 : byte & 0xF;
}

// The exact stored value of feature c of a record, whose code lies in `row` and whose float16
// parameters (scale, then int4's offset) at `params`: the row's block's, or its group's channel's.
double stored_value(const std::byte* row, std::int64_t c, DType dtype, const std::byte* params) {
  const double scale = to_float(float16{load_u16(params)});  // every format's first parameter
  if (std::isnan(scale)) return kNaN;                        // a block (or channel) that held a non-finite value
  if (dtype == DType::int8) return static_cast<double>(static_cast<std::int8_t>(row[c])) * scale;
  // Exact in double and in float: 3 or 2 mantissa bits times a float16's 11.
  if (dtype == DType::fp8_e4m3 || dtype == DType::fp8_e5m2) return detail::fp8_value(dtype, static_cast<std::uint8_t>(row[c])) * scale;
  const double offset = to_float(float16{load_u16(params + 2)});
  return offset + int4_code_at(row, c) * scale;  // exact in double: 4 × 11 bits plus an f16
}

// The exact stored values c0 .. c0 + count of a row, as T.
template <class T>
void dequantize(const std::byte* row, std::int64_t width, DType dtype, std::int64_t c0, std::int64_t count, T* out) {
  for (std::int64_t c = c0; c < c0 + count; ++c)
    out[c - c0] = static_cast<T>(stored_value(row, c, dtype, row + quantized_block_params_at(dtype, width, c / kQuantBlock)));
}

// Where channel c's parameters lie in a group quantised per channel: record c / per_row, at its
// parameter entry c mod per_row (quantize_channel_group).
template <class Byte>
Byte* channel_params_at(Byte* const* rows, std::int64_t width, DType dtype, std::int64_t c) {
  const std::int64_t per_row = width / kQuantBlock;
  return rows[c / per_row] + quantized_block_params_at(dtype, width, c % per_row);
}

// The same for row r of a group quantised per channel.
template <class T>
void dequantize_channels(const std::byte* const* rows, std::int64_t r, std::int64_t width, DType dtype, std::int64_t c0,
                         std::int64_t count, T* out) {
  for (std::int64_t c = c0; c < c0 + count; ++c)
    out[c - c0] = static_cast<T>(stored_value(rows[r], c, dtype, channel_params_at(rows, width, dtype, c)));
}

}  // namespace

std::int64_t quantized_row_bytes(DType dtype, std::int64_t width) noexcept {
  // The record ends where a block past the last one would have its parameters.
  return is_quantized(dtype) ? quantized_block_params_at(dtype, width, width / kQuantBlock) : 0;
}

void quantize_row(const float* in, std::int64_t width, DType dtype, std::byte* row) noexcept {
  for (std::int64_t b = 0; b < width / kQuantBlock; ++b) {
    std::byte* params = row + quantized_block_params_at(dtype, width, b);
    if (dtype == DType::int8) {
      quantize_int8_block(in + b * kQuantBlock, row + b * kQuantBlock, params);
    } else if (dtype == DType::int4) {
      quantize_int4_block(in + b * kQuantBlock, row + b * (kQuantBlock / 2), params);
    } else if (dtype == DType::fp8_e4m3 || dtype == DType::fp8_e5m2) {
      quantize_fp8_block(dtype, in + b * kQuantBlock, row + b * kQuantBlock, params);
    }
  }
}

void dequantize_row(const std::byte* row, std::int64_t width, DType dtype, std::int64_t c0, std::int64_t count,
                    float* out) noexcept {
  dequantize(row, width, dtype, c0, count, out);
}

void dequantize_row(const std::byte* row, std::int64_t width, DType dtype, std::int64_t c0, std::int64_t count,
                    double* out) noexcept {
  dequantize(row, width, dtype, c0, count, out);
}

void quantize_channel_group(const float* in, std::int64_t width, DType dtype, std::byte* const* rows) noexcept {
  if (!has_channel_groups(dtype)) return;
  if (dtype == DType::int4)  // nibbles are or-ed in below
    for (std::int64_t r = 0; r < kChannelGroup; ++r) std::memset(rows[r], 0, static_cast<std::size_t>(width / 2));
  for (std::int64_t c = 0; c < width; ++c) {
    const float* channel = in + c;  // its kChannelGroup values, `width` apart
    std::byte* params = channel_params_at(rows, width, dtype, c);
    if (dtype == DType::int8) {
      const float16 scale = int8_scale(channel, width);
      for (std::int64_t r = 0; r < kChannelGroup; ++r) rows[r][c] = int8_code(channel[r * width], to_float(scale));
      store_u16(params, scale.bits);
    } else {
      float16 scale, offset;
      int4_params(channel, width, scale, offset);
      for (std::int64_t r = 0; r < kChannelGroup; ++r) {
        const std::uint8_t code = int4_code(channel[r * width], to_float(scale), to_float(offset));
        rows[r][int4_byte(c)] |= static_cast<std::byte>(int4_high(c) ? code << 4 : code);
      }
      store_u16(params, scale.bits);
      store_u16(params + 2, offset.bits);
    }
  }
}

void channel_group_params(const std::byte* const* rows, std::int64_t width, DType dtype, float* scale, float* offset) noexcept {
  for (std::int64_t c = 0; c < width; ++c) {
    const std::byte* params = channel_params_at(rows, width, dtype, c);
    scale[c] = to_float(float16{load_u16(params)});
    if (dtype == DType::int4) offset[c] = to_float(float16{load_u16(params + 2)});
  }
}

void dequantize_channel_group_row(const std::byte* const* rows, std::int64_t r, std::int64_t width, DType dtype,
                                  std::int64_t c0, std::int64_t count, float* out) noexcept {
  dequantize_channels(rows, r, width, dtype, c0, count, out);
}

void dequantize_channel_group_row(const std::byte* const* rows, std::int64_t r, std::int64_t width, DType dtype,
                                  std::int64_t c0, std::int64_t count, double* out) noexcept {
  dequantize_channels(rows, r, width, dtype, c0, count, out);
}

}  // namespace attnkit
