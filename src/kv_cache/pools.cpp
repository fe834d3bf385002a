#include "kv_cache/pools.hpp"

#include <array>
#include <cstddef>
#include <vector>

#include "attnkit/quantized.hpp"
#include "core/element_io.hpp"
#include "kv_cache/geometry.hpp"

namespace attnkit::detail {
namespace {

// dst[at, :] = src[from, :] for rank-4 views whose last dimensions match, rounded once to dst's dtype:
// through float32 for f32/f16/bf16 sources, element by element through double for f64 ones (f64 →
// f32 → bf16 would round twice and can land one unit off).
void copy_row(ConstTensorView src, std::array<std::int64_t, 3> from, TensorView dst, std::array<std::int64_t, 3> at) {
  const std::int64_t width = dst.size(3);
  if (src.dtype() != DType::f64 || is_quantized(dst.dtype())) {  // quantised from float32 (f64 rounded once first)
    thread_local std::vector<float> row;
    row.resize(static_cast<std::size_t>(width));
    load_row(src, from[0], from[1], from[2], row.data(), width);
    store_row_part(row.data(), dst, at[0], at[1], at[2], 0, width);
    return;
  }
  for (std::int64_t c = 0; c < width; ++c) {
    const double x = *src.at<double>({from[0], from[1], from[2], c});
    store_from_double(static_cast<std::byte*>(dst.data()) +
                          (at[0] * dst.stride(0) + at[1] * dst.stride(1) + at[2] * dst.stride(2) + c * dst.stride(3)) *
                              static_cast<std::int64_t>(dtype_size(dst.dtype())),
                      dst.dtype(), x);
  }
}

// The pools are stored head-major, [Hkv, blocks, block_size, d], and seen as [blocks, Hkv, block_size,
// d]: one head's blocks lie together, so a sequence whose blocks were taken in order reads each head
// as one stream, as a contiguous cache does (block-major storage measured 1.1-1.4x slower at decode:
// the hardware prefetchers ran into the other heads' rows past every block).
// For int8 and int4 storage the tensor's last dimension is the row record's bytes, and the view's the
// row's width (attnkit/quantized.hpp): strides in bytes, one row every record.
template <class View, class T>
View pool_of(T& t, std::int64_t width) {
  if (!is_quantized(t.dtype())) return t.view().permuted({1, 0, 2, 3});
  const std::int64_t heads = t.shape()[0], blocks = t.shape()[1], rows = t.shape()[2], record = t.shape()[3];
  return View(t.raw(), t.dtype(), {blocks, heads, rows, width}, {rows * record, blocks * rows * record, record, 1});
}

}  // namespace

Tensor make_pool(DType dtype, std::int64_t heads, std::int64_t blocks, std::int64_t block_size, std::int64_t width) {
  // Quantized pools hold row records: their last dimension counts bytes.
  return Tensor(dtype, {heads, blocks, block_size, is_quantized(dtype) ? row_bytes(dtype, width) : width});
}

TensorView pool(Tensor& storage, std::int64_t width) { return pool_of<TensorView>(storage, width); }
ConstTensorView pool(const Tensor& storage, std::int64_t width) { return pool_of<ConstTensorView>(storage, width); }

void write_rows(ConstTensorView keys, ConstTensorView values, std::int64_t b, std::span<const std::int64_t> table,
                std::int64_t block_size, std::int64_t length, TensorView key_pool, TensorView value_pool) {
  const std::int64_t t = keys.size(2), heads = keys.size(1);
  for (std::int64_t token = 0; token < t; ++token) {
    const std::int64_t position = length + token;
    const std::int64_t block = table[static_cast<std::size_t>(position / block_size)], slot = position % block_size;
    for (std::int64_t g = 0; g < heads; ++g) {
      copy_row(keys, {b, g, token}, key_pool, {block, g, slot});
      copy_row(values, {b, g, token}, value_pool, {block, g, slot});
    }
  }
}

void group_keys(ConstTensorView keys, std::int64_t b, std::span<const std::int64_t> table, std::int64_t block_size,
                std::int64_t length, TensorView key_pool, float* pending) {
  const std::int64_t t = keys.size(2), heads = keys.size(1), width = keys.size(3);
  for (std::int64_t token = 0; token < t; ++token) {
    const std::int64_t position = length + token, r = position % kChannelGroup;
    for (std::int64_t g = 0; g < heads; ++g) {
      float* group = pending + g * kChannelGroup * width;
      load_row(keys, b, g, token, group + r * width, width);
      if (r + 1 < kChannelGroup) continue;
      std::byte* rows[kChannelGroup];
      for (std::int64_t i = 0; i < kChannelGroup; ++i) {
        const std::int64_t at = position - r + i;
        rows[i] = key_pool.at<std::byte>({table[static_cast<std::size_t>(at / block_size)], g, at % block_size, 0});
      }
      quantize_channel_group(group, width, key_pool.dtype(), rows);
    }
  }
}

Tensor gather(ConstTensorView pool, std::span<const std::int64_t> table, std::int64_t block_size, std::int64_t length,
              std::int64_t channel_group) {
  const std::int64_t heads = pool.size(1), width = pool.size(3);
  auto block_of = [&](std::int64_t j) { return table[static_cast<std::size_t>(j / block_size)]; };
  auto row_of = [&](std::int64_t g, std::int64_t j) { return pool.at<std::byte>({block_of(j), g, j % block_size, 0}); };
  if (is_quantized(pool.dtype())) {  // the stored values exactly, in float64 (int4's need more than 24 bits)
    Tensor out(DType::f64, {heads, length, width});
    const std::int64_t grouped = channel_group > 0 ? length / channel_group * channel_group : 0;
    for (std::int64_t g = 0; g < heads; ++g)
      for (std::int64_t j = 0; j < length; ++j) {
        double* into = out.data<double>() + (g * length + j) * width;
        if (j >= grouped) {
          dequantize_row(row_of(g, j), width, pool.dtype(), 0, width, into);
          continue;
        }
        const std::byte* rows[kChannelGroup];
        for (std::int64_t i = 0; i < kChannelGroup; ++i) rows[i] = row_of(g, j - j % kChannelGroup + i);
        dequantize_channel_group_row(rows, j % kChannelGroup, width, pool.dtype(), 0, width, into);
      }
    return out;
  }
  Tensor out(pool.dtype(), {heads, length, width});
  std::vector<float> row(static_cast<std::size_t>(width));
  const TensorView dest = out.view4();
  for (std::int64_t g = 0; g < heads; ++g)
    for (std::int64_t j = 0; j < length; ++j) {
      load_row(pool, block_of(j), g, j % block_size, row.data(), width);
      store_row_part(row.data(), dest, 0, g, j, 0, width);
    }
  return out;
}

}  // namespace attnkit::detail
