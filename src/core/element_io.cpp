#include "core/element_io.hpp"

#include <algorithm>
#include <bit>
#include <cstring>

#include "attnkit/quantized.hpp"
#include "core/bf16_rounding.hpp"

namespace attnkit::detail {
namespace {

template <class View>
auto* element_address(const View& t, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t c) {
  using Byte = std::conditional_t<std::is_const_v<std::remove_pointer_t<decltype(t.data())>>, const std::byte, std::byte>;
  const std::int64_t offset = b * t.stride(0) + h * t.stride(1) + i * t.stride(2) + c * t.stride(3);
  return static_cast<Byte*>(t.data()) + offset * static_cast<std::int64_t>(dtype_size(t.dtype()));
}

float bf16_bits_to_float(std::uint16_t bits) { return std::bit_cast<float>(std::uint32_t{bits} << 16); }

}  // namespace

void load_row_part(ConstTensorView t, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t c0, float* out,
                   std::int64_t count) {
  if (count == 0) return;  // an empty row may have no storage at all (a null data pointer)
  if (is_quantized(t.dtype())) {  // a row record, addressed by its start (attnkit/quantized.hpp)
    dequantize_row(element_address(t, b, h, i, 0), t.size(3), t.dtype(), c0, count, out);
    return;
  }
  const auto* base = element_address(t, b, h, i, c0);
  const std::int64_t step = t.stride(3) * static_cast<std::int64_t>(dtype_size(t.dtype()));
  switch (t.dtype()) {
    case DType::f32:
      if (t.stride(3) == 1) {
        std::memcpy(out, base, static_cast<std::size_t>(count) * sizeof(float));
      } else {
        for (std::int64_t c = 0; c < count; ++c) std::memcpy(out + c, base + c * step, sizeof(float));
      }
      return;
    case DType::bf16:
      // Element by element at a step of 2 bytes, which vectorises. (Through a 256-element buffer, the
      // buffer's copy of variable size compiles to `rep movsq`, whose start-up cost was half of
      // store_row_part's time in a bf16 causal forward at n = m = 1024, d = 128; see docs/tuning.md,
      // "Storing output rows".)
      if (t.stride(3) == 1) {
        for (std::int64_t c = 0; c < count; ++c) {
          std::uint16_t bits;
          std::memcpy(&bits, base + c * 2, sizeof bits);
          out[c] = bf16_bits_to_float(bits);
        }
        return;
      }
      for (std::int64_t c = 0; c < count; ++c) {
        std::uint16_t bits;
        std::memcpy(&bits, base + c * step, sizeof bits);
        out[c] = bf16_bits_to_float(bits);
      }
      return;
    case DType::f16:
      for (std::int64_t c = 0; c < count; ++c) {
        float16 x;
        std::memcpy(&x.bits, base + c * step, sizeof x.bits);
        out[c] = to_float(x);
      }
      return;
    default:
      for (std::int64_t c = 0; c < count; ++c) out[c] = static_cast<float>(load_as_double(base + c * step, t.dtype()));
      return;
  }
}

void store_row_part(const float* in, TensorView t, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t c0,
                    std::int64_t count) {
  if (count == 0) return;  // an empty row may have no storage at all (a null data pointer)
  if (is_quantized(t.dtype())) {  // whole rows only: each block's scale depends on all its values
    quantize_row(in, count, t.dtype(), element_address(t, b, h, i, 0));
    return;
  }
  auto* base = element_address(t, b, h, i, c0);
  const std::int64_t step = t.stride(3) * static_cast<std::int64_t>(dtype_size(t.dtype()));
  switch (t.dtype()) {
    case DType::f32:
      if (t.stride(3) == 1) {  // one copy: element by element it was 1.8% of a causal forward (n = 1024, d = 64)
        std::memcpy(base, in, static_cast<std::size_t>(count) * sizeof(float));
      } else {
        for (std::int64_t c = 0; c < count; ++c) std::memcpy(base + c * step, in + c, sizeof(float));
      }
      return;
    case DType::bf16:
      if (t.stride(3) == 1) {  // as load_row_part's, without a buffer's rep movsq
        for (std::int64_t c = 0; c < count; ++c) {
          const std::uint16_t bits = bf16_bits_nearest_even(std::bit_cast<std::uint32_t>(in[c]));
          std::memcpy(base + c * 2, &bits, sizeof bits);
        }
        return;
      }
      for (std::int64_t c = 0; c < count; ++c) {
        const bfloat16 x = to_bfloat16(in[c]);
        std::memcpy(base + c * step, &x.bits, sizeof x.bits);
      }
      return;
    case DType::f16:
      for (std::int64_t c = 0; c < count; ++c) {
        const float16 x = to_float16(in[c]);
        std::memcpy(base + c * step, &x.bits, sizeof x.bits);
      }
      return;
    default:
      for (std::int64_t c = 0; c < count; ++c) store_from_double(base + c * step, t.dtype(), in[c]);
      return;
  }
}

void load_mask_row(const Problem& p, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j0,
                   std::int64_t count, float* out) {
  if (p.mask_kind == MaskKind::keep) {
    const auto* base = element_address(p.mask, b, h, i, j0);
    for (std::int64_t j = 0; j < count; ++j) out[j] = *reinterpret_cast<const unsigned char*>(base + j * p.mask.stride(3)) != 0;
    return;
  }
  load_row_part(p.mask, b, h, i, j0, out, count);
}

}  // namespace attnkit::detail
