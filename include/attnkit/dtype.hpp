/// \file
/// Element types and the 16-bit float formats.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace attnkit {

/// Element types a tensor may hold. Q, K, V and gradients take the four floating types; masks take
/// boolean (keep-mask) or a floating type (additive bias); the integer types exist for .npy I/O.
/// int8, int4, fp8_e4m3 and fp8_e5m2 are not element types but the block-quantized row formats of a KV cache's storage
/// (attnkit/quantized.hpp): a view of them addresses rows in bytes (dtype_size 1, strides in bytes,
/// the last dimension's size the row's logical width), and only a KVCache makes and reads them.
enum class DType : std::uint8_t { f64, f32, f16, bf16, boolean, i32, i64, int8, int4, fp8_e4m3, fp8_e5m2 };
/// \var DType::f64
/// IEEE binary64 (double).
/// \var DType::f32
/// IEEE binary32 (float).
/// \var DType::f16
/// IEEE binary16, stored as attnkit::float16.
/// \var DType::bf16
/// bfloat16, stored as attnkit::bfloat16.
/// \var DType::boolean
/// One byte, 0 or 1 (C++ bool): keep-masks (true = attend). Its name is "bool".
/// \var DType::i32
/// 32-bit signed integer (.npy I/O, sequence offsets).
/// \var DType::i64
/// 64-bit signed integer (.npy I/O, sequence offsets).
/// \var DType::int8
/// KV cache storage only: int8 codes in blocks of 32 with a float16 scale each (attnkit/quantized.hpp).
/// \var DType::int4
/// KV cache storage only: 4-bit codes in blocks of 32 with a float16 scale and offset each
/// (attnkit/quantized.hpp).
/// \var DType::fp8_e4m3
/// KV cache storage only: OCP FP8 E4M3 codes (largest 448, no infinities) in blocks of 32 with a
/// float16 power-of-two scale each (attnkit/quantized.hpp).
/// \var DType::fp8_e5m2
/// KV cache storage only: OCP FP8 E5M2 codes (largest 57344) in blocks of 32 with a float16
/// power-of-two scale each (attnkit/quantized.hpp).

/// Bytes per element (the quantized row formats: 1, the unit of their strides).
std::size_t dtype_size(DType dtype) noexcept;
/// Stable name of a dtype: "f64", "f32", "f16", "bf16", "bool", "i32", "i64", "int8", "int4",
/// "fp8_e4m3" or "fp8_e5m2".
std::string_view dtype_name(DType dtype) noexcept;
/// Whether `dtype` is a floating type: f64, f32, f16 or bf16.
bool is_floating(DType dtype) noexcept;

/// IEEE binary16 storage type. Conversions from float round to nearest, ties to even;
/// NaN stays NaN (quiet), ±inf and signed zeros are kept, binary16 subnormals are exact.
struct float16 {
  std::uint16_t bits = 0;  ///< the binary16 bit pattern
};
/// bfloat16 storage type (the upper 16 bits of a float32). Conversions from float round to
/// nearest, ties to even; NaN stays NaN (quiet), ±inf and signed zeros are kept.
struct bfloat16 {
  std::uint16_t bits = 0;  ///< the bfloat16 bit pattern
};

/// The exact float value of a binary16 number.
float to_float(float16 x) noexcept;
/// The exact float value of a bfloat16 number.
float to_float(bfloat16 x) noexcept;
/// `x` rounded to binary16 (to nearest, ties to even; overflow gives ±inf).
float16 to_float16(float x) noexcept;
/// `x` rounded to bfloat16 (to nearest, ties to even; overflow gives ±inf).
bfloat16 to_bfloat16(float x) noexcept;

/// The DType of a C++ element type, for typed access to tensors (Tensor::data, BasicTensorView::at).
/// Defined for double, float, float16, bfloat16, bool, std::int32_t and std::int64_t.
template <class T>
constexpr DType dtype_of();
/// DType::f64 for double.
template <> constexpr DType dtype_of<double>() { return DType::f64; }
/// DType::f32 for float.
template <> constexpr DType dtype_of<float>() { return DType::f32; }
/// DType::f16 for float16.
template <> constexpr DType dtype_of<float16>() { return DType::f16; }
/// DType::bf16 for bfloat16.
template <> constexpr DType dtype_of<bfloat16>() { return DType::bf16; }
/// DType::boolean for bool.
template <> constexpr DType dtype_of<bool>() { return DType::boolean; }
/// DType::i32 for std::int32_t.
template <> constexpr DType dtype_of<std::int32_t>() { return DType::i32; }
/// DType::i64 for std::int64_t.
template <> constexpr DType dtype_of<std::int64_t>() { return DType::i64; }

}  // namespace attnkit
