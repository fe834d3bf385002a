// The KV cache's sizes (src/kv_cache/geometry.hpp): a contiguous cache as one block per sequence, a
// paged pool's default and capped block counts, row bytes of plain and quantized storage, and
// products that overflow named in the error.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "attnkit/error.hpp"
#include "attnkit/quantized.hpp"
#include "kv_cache/geometry.hpp"

namespace attnkit {
namespace {

KVCacheConfig config(KVCacheLayout layout) {
  KVCacheConfig c;
  c.num_kv_heads = 2;
  c.head_dim = 64;
  c.max_sequences = 3;
  c.max_sequence_length = 100;
  c.layout = layout;
  c.block_size = 16;
  return c;
}

TEST(KVCacheGeometry, ContiguousIsOneBlockOfTheFullLengthPerSequence) {
  const detail::CacheGeometry g = detail::cache_geometry(config(KVCacheLayout::contiguous));
  EXPECT_EQ(g.blocks, 3);
  EXPECT_EQ(g.block_size, 100);
  EXPECT_EQ(g.blocks_per_sequence, 1);
  EXPECT_EQ(g.blocks_for(0), 0);
  EXPECT_EQ(g.blocks_for(1), 1);
  EXPECT_EQ(g.blocks_for(100), 1);
}

TEST(KVCacheGeometry, PagedDefaultsToEverySequenceAtFullLength) {
  const detail::CacheGeometry g = detail::cache_geometry(config(KVCacheLayout::paged));
  EXPECT_EQ(g.block_size, 16);
  EXPECT_EQ(g.blocks_per_sequence, 7);  // ceil(100 / 16)
  EXPECT_EQ(g.blocks, 21);              // 3 sequences × 7
  EXPECT_EQ(g.blocks_for(16), 1);
  EXPECT_EQ(g.blocks_for(17), 2);
}

TEST(KVCacheGeometry, ASequenceNeverListsMoreBlocksThanThePoolHas) {
  KVCacheConfig c = config(KVCacheLayout::paged);
  c.num_blocks = 4;
  const detail::CacheGeometry g = detail::cache_geometry(c);
  EXPECT_EQ(g.blocks, 4);
  EXPECT_EQ(g.blocks_per_sequence, 4);
  c.num_blocks = 50;
  EXPECT_EQ(detail::cache_geometry(c).blocks_per_sequence, 7);
}

TEST(KVCacheGeometry, CeilDivDoesNotOverflowNearTheTop) {
  constexpr std::int64_t top = std::numeric_limits<std::int64_t>::max();
  EXPECT_EQ(detail::ceil_div(top, 1), top);
  EXPECT_EQ(detail::ceil_div(top, 2), top / 2 + 1);
  EXPECT_EQ(detail::ceil_div(0, 16), 0);
}

TEST(KVCacheGeometry, RowBytesOfPlainAndQuantizedStorage) {
  EXPECT_EQ(detail::row_bytes(DType::f32, 64), 256);
  EXPECT_EQ(detail::row_bytes(DType::bf16, 64), 128);
  EXPECT_EQ(detail::row_bytes(DType::int8, 64), 2 * quantized_row_bytes(DType::int8, kQuantBlock));
  EXPECT_EQ(detail::row_bytes(DType::int8, 64), quantized_row_bytes(DType::int8, 64));
  EXPECT_EQ(detail::row_bytes(DType::int4, 96), quantized_row_bytes(DType::int4, 96));
}

TEST(KVCacheGeometry, AnOverflowingProductNamesWhatOverflowed) {
  EXPECT_EQ(detail::checked_product({3, 5, 7}, "x"), 105);
  try {
    detail::checked_product({std::int64_t{1} << 40, std::int64_t{1} << 40}, "the key pool's byte size");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::size_overflow);
    EXPECT_STREQ(e.what(), "KVCacheConfig: the key pool's byte size overflows 64 bits");
  }
  KVCacheConfig c = config(KVCacheLayout::paged);
  c.max_sequences = std::int64_t{1} << 62;
  EXPECT_THROW(detail::cache_geometry(c), Error);  // the default block count
}

}  // namespace
}  // namespace attnkit
