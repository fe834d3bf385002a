// attnkit — element types and the 16-bit float formats.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace attnkit {

// Element types a tensor may hold. Q, K, V and gradients take the four floating types; masks take
// boolean (keep-mask) or a floating type (additive bias); the integer types exist for .npy I/O.
// int8 and int4 are not element types but the block-quantized row formats of a KV cache's storage
// (attnkit/quantized.hpp): a view of them addresses rows in bytes (dtype_size 1, strides in bytes,
// the last dimension's size the row's logical width), and only a KVCache makes and reads them.
enum class DType : std::uint8_t { f64, f32, f16, bf16, boolean, i32, i64, int8, int4 };

std::size_t dtype_size(DType dtype) noexcept;     // bytes per element (int8, int4: 1, the unit of their strides)
std::string_view dtype_name(DType dtype) noexcept;  // "f64", "f32", "f16", "bf16", "bool", "i32", "i64", "int8", "int4"
bool is_floating(DType dtype) noexcept;          // f64, f32, f16 or bf16

// IEEE binary16 and bfloat16 storage types. Conversions from float round to nearest, ties to even;
// NaN stays NaN (quiet), ±inf and signed zeros are kept, binary16 subnormals are exact.
struct float16 {
  std::uint16_t bits = 0;
};
struct bfloat16 {
  std::uint16_t bits = 0;
};

float to_float(float16 x) noexcept;
float to_float(bfloat16 x) noexcept;
float16 to_float16(float x) noexcept;
bfloat16 to_bfloat16(float x) noexcept;

// The DType of a C++ element type, for typed access to tensors.
template <class T>
constexpr DType dtype_of();
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<float16>() { return DType::f16; }
template <> constexpr DType dtype_of<bfloat16>() { return DType::bf16; }
template <> constexpr DType dtype_of<bool>() { return DType::boolean; }
template <> constexpr DType dtype_of<std::int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<std::int64_t>() { return DType::i64; }

}  // namespace attnkit
