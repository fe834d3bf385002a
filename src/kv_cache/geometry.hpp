// The KV cache's sizes: how many blocks of how many rows the pools hold, how many entries each
// sequence's block table has, and how many bytes a stored row takes. A contiguous cache is the
// special case of one block of max_sequence_length rows per sequence, so that the attention kernel
// reads both layouts through one block table.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "attnkit/dtype.hpp"
#include "attnkit/kv_cache.hpp"
#include "core/integer.hpp"

namespace attnkit::detail {

// a · b · ..., or Error(size_overflow) naming `what` ("KVCacheConfig: <what> overflows 64 bits").
std::int64_t checked_product(std::initializer_list<std::int64_t> factors, const char* what);

struct CacheGeometry {
  std::int64_t blocks = 0;               // in each pool
  std::int64_t block_size = 0;           // rows per block (contiguous: max_sequence_length)
  std::int64_t blocks_per_sequence = 0;  // entries in a row of the block table

  // Blocks that hold `tokens` rows.
  std::int64_t blocks_for(std::int64_t tokens) const { return ceil_div(tokens, block_size); }
};

// The geometry of a checked configuration. Paged without num_blocks: enough blocks for every
// sequence at full length; a sequence never lists more blocks than the pool has.
CacheGeometry cache_geometry(const KVCacheConfig& config);

// Bytes of one stored row of `width` features (a whole number of quantization blocks for int8 and
// int4), or Error(size_overflow).
std::int64_t row_bytes(DType dtype, std::int64_t width);

}  // namespace attnkit::detail
