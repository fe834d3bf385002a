// The KV cache's storage: two pools, keys and values, stored head-major [Hkv, blocks, block_size, d]
// and seen as [blocks, Hkv, block_size, d]. Rows are written into them as they are appended and
// gathered back out by a sequence's block table.
#pragma once

#include <cstdint>
#include <span>

#include "attnkit/tensor.hpp"

namespace attnkit::detail {

// The shape a pool is allocated with, [Hkv, blocks, block_size, last]: `last` is the width, or for
// int8 and int4 storage the bytes of a row's record (pool() views it by width).
Tensor make_pool(DType dtype, std::int64_t heads, std::int64_t blocks, std::int64_t block_size, std::int64_t width);

// A pool as [blocks, Hkv, block_size, width]. For int8 and int4 storage the strides count bytes, one
// row every record (attnkit/quantized.hpp).
TensorView pool(Tensor& storage, std::int64_t width);
ConstTensorView pool(const Tensor& storage, std::int64_t width);

// Writes entry b of keys [B, Hkv, t, d_k] and values [B, Hkv, t, d_v] after the `length` rows a
// sequence holds, at the places its block `table` gives (which already lists the blocks they need),
// each value rounded once to the pool's dtype.
void write_rows(ConstTensorView keys, ConstTensorView values, std::int64_t b, std::span<const std::int64_t> table,
                std::int64_t block_size, std::int64_t length, TensorView key_pool, TensorView value_pool);

// Keys quantised per channel (attnkit/quantized.hpp, quantize_channel_group): keeps entry b's new
// keys [B, Hkv, t, d_k], rounded once to float32, in `pending` ([Hkv][kChannelGroup][d_k]: the
// sequence's incomplete group, rows after the `length` it held) and quantises each group that fills
// into its rows of the key pool, which write_rows has written as per-token records.
void group_keys(ConstTensorView keys, std::int64_t b, std::span<const std::int64_t> table, std::int64_t block_size,
                std::int64_t length, TensorView key_pool, float* pending);

// A sequence's first `length` rows of a pool [blocks, Hkv, block_size, d], as [Hkv, length, d]: in
// the pool's dtype, or for the quantized formats the stored values exactly, as f64; with
// `channel_group`, rows before `length` rounded down to a multiple of it read as groups quantised
// per channel.
Tensor gather(ConstTensorView pool, std::span<const std::int64_t> table, std::int64_t block_size, std::int64_t length,
              std::int64_t channel_group = 0);

}  // namespace attnkit::detail
