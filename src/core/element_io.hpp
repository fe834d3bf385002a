// Reading and writing rows of strided tensors of any floating dtype as float32: the fast kernels' loads
// and stores (once per row, from every target's kernel; compiled once, without target-specific flags)
// and the KV cache's copies.
#pragma once

#include <cstdint>

#include "attnkit/tensor.hpp"
#include "core/problem.hpp"

namespace attnkit::detail {

// out[c] = t[b, h, i, c0 + c] for c < count. Rows of a quantized dtype (int8, int4: KV cache storage)
// are read back from their record.
void load_row_part(ConstTensorView t, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t c0, float* out,
                   std::int64_t count);
inline void load_row(ConstTensorView t, std::int64_t b, std::int64_t h, std::int64_t i, float* out, std::int64_t count) {
  load_row_part(t, b, h, i, 0, out, count);
}

// t[b, h, i, c0 + c] = in[c] for c < count, rounded to t's dtype (nearest even). A quantized dtype
// takes whole rows only (c0 = 0, count = the row's width), quantised as attnkit/quantized.hpp says.
void store_row_part(const float* in, TensorView t, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t c0,
                    std::int64_t count);

// out[j] = the mask of (b, h, i, j0 + j) for j < count: an additive mask's value, or 1/0 for a
// keep-mask (true/false).
void load_mask_row(const Problem& p, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j0,
                   std::int64_t count, float* out);

}  // namespace attnkit::detail
