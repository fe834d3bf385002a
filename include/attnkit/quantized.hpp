/// \file
/// Block-quantized rows: the int8, int4 and fp8 storage of a KV cache (attnkit/kv_cache.hpp).
///
/// Decoding reads the whole cache for every new token, so storing keys and values in 8 or 4 bits
/// makes it read 1.9× or 3.2× fewer bytes than bf16. A row of `width` values (width a multiple of
/// kQuantBlock) is quantised in blocks of kQuantBlock consecutive values, each block with its own
/// float16 scale, and stored as one record of quantized_row_bytes(dtype, width) bytes, the codes first:
/// \code{.unparsed}
///   int8  width bytes of codes (two's complement), then width / 32 scales (float16, little-endian):
///         value c = code[c] · scale[c / 32]. Symmetric: scale = max|x| / 127 rounded to float16,
///         code = x / scale rounded to nearest, ties to even, in −127 … 127.
///   int4  width / 2 bytes of codes, then width / 32 pairs (scale, offset) of float16: value c =
///         offset[b] + code · scale[b] for its block b. Asymmetric, as keys are often not centred:
///         offset = the block's minimum and scale = (max − min) / 15, each rounded to float16, code =
///         (x − offset) / scale rounded to nearest, ties to even, in 0 … 15. Byte i of a block's 16
///         holds the codes of the block's values i (low nibble) and i + 16 (high nibble), so that one
///         16-byte load widens to the block's two halves of 16 lanes.
///   fp8_e4m3, fp8_e5m2
///         width bytes of OCP FP8 codes (E4M3: bias 7, largest 448, NaN at 0x7F and 0xFF, no
///         infinities; E5M2: bias 15, largest 57344, ±inf and NaN as float16's top byte), then
///         width / 32 scales (float16): value c = fp8(code[c]) · scale[c / 32]. The scale is the
///         smallest power of two (at least 2^-24) that brings the block's largest magnitude within
///         the format's largest value, so dividing by it is exact and the one rounding is the
///         code's: x / scale rounded to the nearest code, ties to the even one.
/// \endcode
///
/// The division is done in double, so quantising is deterministic on every machine. A block holding
/// NaN or ±inf, or whose scale (or offset) overflows float16, is stored with a NaN scale: every value
/// of the block reads back as NaN, never as a plausible number. A block of zeros (or, int4, of equal
/// values) has scale 0 and reads back exactly (int4: up to the offset's float16 rounding); an fp8
/// block of zeros has scale 2^-24 and zero codes. Every stored value is exact in float32.
#pragma once

#include <cstddef>
#include <cstdint>

#include "attnkit/dtype.hpp"

namespace attnkit {

/// Values per scale: the block length of the quantized row formats.
inline constexpr std::int64_t kQuantBlock = 32;

/// The byte offset, within a row record of `width` values, of block `block`'s float16 parameters:
/// its scale (int8, fp8), or its scale then offset (int4). The one definition of where they lie, for
/// the quantiser and the kernels alike.
constexpr std::int64_t quantized_block_params_at(DType dtype, std::int64_t width, std::int64_t block) {
  return dtype == DType::int4 ? width / 2 + 4 * block : width + 2 * block;
}

/// Whether `dtype` is one of the block-quantized row formats (int8, int4, fp8_e4m3, fp8_e5m2).
constexpr bool is_quantized(DType dtype) noexcept {
  return dtype == DType::int8 || dtype == DType::int4 || dtype == DType::fp8_e4m3 || dtype == DType::fp8_e5m2;
}

/// Tokens per group of keys quantised per channel (KeyQuantization::per_channel of a KV cache).
inline constexpr std::int64_t kChannelGroup = 32;

/// Whether `dtype` can be quantised per channel over groups of tokens (int8 and int4).
constexpr bool has_channel_groups(DType dtype) noexcept { return dtype == DType::int8 || dtype == DType::int4; }

/// Bytes of one quantized row of `width` values (width a multiple of kQuantBlock).
std::int64_t quantized_row_bytes(DType dtype, std::int64_t width) noexcept;

/// Quantises in[0 .. width) into one row record at `row` (quantized_row_bytes(dtype, width) bytes).
void quantize_row(const float* in, std::int64_t width, DType dtype, std::byte* row) noexcept;

/// The row's values c0 .. c0 + count as float32 (each the exact value rounded once to float).
void dequantize_row(const std::byte* row, std::int64_t width, DType dtype, std::int64_t c0, std::int64_t count,
                    float* out) noexcept;
/// The same in double: the stored values exactly (the float64 reference reads rows this way).
void dequantize_row(const std::byte* row, std::int64_t width, DType dtype, std::int64_t c0, std::int64_t count,
                    double* out) noexcept;

/// Quantises kChannelGroup rows of `width` values per channel (int8 or int4), as KIVI does for keys:
/// in[r · width + c] is value c of row r, and rows[r] the record row r is written to (the same
/// quantized_row_bytes(dtype, width) bytes as a row's). Each channel c has its own parameters over
/// the group, found the way quantize_row finds a block's over 32 features (int8: scale = max|x| /
/// 127; int4: offset = the minimum, scale = (max − offset) / 15; float16, codes rounded to nearest,
/// ties to even; NaN parameters for a channel that holds NaN or ±inf). The codes lie where a row
/// record has them; the parameter bytes of the 32 records together hold the group's parameters:
/// row r's parameter bytes are those of channels r · width/32 … (r + 1) · width/32 − 1, channel c's
/// at quantized_block_params_at(dtype, width, c mod width/32) of record c / (width/32).
void quantize_channel_group(const float* in, std::int64_t width, DType dtype, std::byte* const* rows) noexcept;

/// The group's per-channel parameters as floats: scale[c], and for int4 offset[c] (else untouched).
void channel_group_params(const std::byte* const* rows, std::int64_t width, DType dtype, float* scale,
                          float* offset) noexcept;

/// Values c0 .. c0 + count of row r of a group quantised per channel (rows[0 .. kChannelGroup) its
/// records), as float32: each the exact value rounded once.
void dequantize_channel_group_row(const std::byte* const* rows, std::int64_t r, std::int64_t width, DType dtype,
                                  std::int64_t c0, std::int64_t count, float* out) noexcept;
/// The same in double: the stored values exactly.
void dequantize_channel_group_row(const std::byte* const* rows, std::int64_t r, std::int64_t width, DType dtype,
                                  std::int64_t c0, std::int64_t count, double* out) noexcept;

}  // namespace attnkit
