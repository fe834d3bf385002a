#include "kv_cache/geometry.hpp"

#include <algorithm>
#include <string>

#include "attnkit/error.hpp"
#include "attnkit/quantized.hpp"

namespace attnkit::detail {

std::int64_t checked_product(std::initializer_list<std::int64_t> factors, const char* what) {
  std::int64_t product = 1;
  for (std::int64_t f : factors) {
    if (__builtin_mul_overflow(product, f, &product)) {
      throw Error(ErrorCode::size_overflow, std::string("KVCacheConfig: ") + what + " overflows 64 bits");
    }
  }
  return product;
}

CacheGeometry cache_geometry(const KVCacheConfig& c) {
  CacheGeometry g;
  if (c.layout == KVCacheLayout::contiguous) {
    g.block_size = c.max_sequence_length;
    g.blocks_per_sequence = 1;
    g.blocks = c.max_sequences;
    return g;
  }
  g.block_size = c.block_size;
  const std::int64_t blocks_at_full_length = ceil_div(c.max_sequence_length, c.block_size);
  g.blocks = c.num_blocks > 0 ? c.num_blocks : checked_product({c.max_sequences, blocks_at_full_length}, "the default block count");
  // No sequence can hold more blocks than the pool has, whatever its length limit says.
  g.blocks_per_sequence = std::min(blocks_at_full_length, g.blocks);
  return g;
}

std::int64_t row_bytes(DType dtype, std::int64_t width) {
  if (!is_quantized(dtype)) return checked_product({width, static_cast<std::int64_t>(dtype_size(dtype))}, "a row's byte size");
  return checked_product({width / kQuantBlock, quantized_row_bytes(dtype, kQuantBlock)}, "a row's byte size");
}

}  // namespace attnkit::detail
