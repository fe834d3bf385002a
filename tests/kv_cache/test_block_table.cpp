// The KV cache's allocation (src/kv_cache/block_table.hpp): blocks handed out in increasing order
// from a fresh free list, a sequence growing across block boundaries, blocks returned on release and
// reused, and the room a sequence has left.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kv_cache/block_table.hpp"

namespace attnkit {
namespace {

const detail::CacheGeometry kPaged{.blocks = 6, .block_size = 4, .blocks_per_sequence = 3};

TEST(KVCacheBlockTable, AFreshFreeListHandsOutBlocksInIncreasingOrder) {
  std::vector<std::int64_t> free_list{42};
  detail::fill_free_list(free_list, 4);
  EXPECT_EQ(free_list, (std::vector<std::int64_t>{3, 2, 1, 0}));
  EXPECT_EQ(free_list.back(), 0);
  detail::fill_free_list(free_list, 0);
  EXPECT_TRUE(free_list.empty());
}

TEST(KVCacheBlockTable, GrowingTakesABlockAtEachBoundary) {
  EXPECT_EQ(detail::blocks_to_grow(kPaged, true, 0, 1), 1);
  EXPECT_EQ(detail::blocks_to_grow(kPaged, true, 1, 3), 0);   // fills the first block
  EXPECT_EQ(detail::blocks_to_grow(kPaged, true, 4, 1), 1);   // starts the second
  EXPECT_EQ(detail::blocks_to_grow(kPaged, true, 3, 6), 2);   // 3 → 9 rows: blocks 1 → 3
  EXPECT_EQ(detail::blocks_to_grow(kPaged, true, 5, 0), 0);
  EXPECT_EQ(detail::blocks_to_grow(kPaged, false, 0, 9), 0);  // contiguous: the slot is held already
}

TEST(KVCacheBlockTable, TakeAndReleaseKeepEveryBlockAccountedFor) {
  std::vector<std::int64_t> free_list;
  detail::fill_free_list(free_list, kPaged.blocks);
  std::vector<std::int64_t> a(3, -1), b(3, -1);
  detail::take_blocks(kPaged, a, 0, 5, free_list);  // two blocks
  detail::take_blocks(kPaged, b, 0, 2, free_list);  // one
  detail::take_blocks(kPaged, a, 5, 3, free_list);  // 8 rows fit in the two it holds
  EXPECT_EQ(a, (std::vector<std::int64_t>{0, 1, -1}));
  EXPECT_EQ(b, (std::vector<std::int64_t>{2, -1, -1}));
  EXPECT_EQ(free_list.size(), 3u);

  detail::release_blocks(a, free_list);
  EXPECT_EQ(a, (std::vector<std::int64_t>{-1, -1, -1}));
  EXPECT_EQ(free_list.size(), 5u);
  detail::take_blocks(kPaged, b, 2, 7, free_list);  // 9 rows: two more, the last ones released first
  EXPECT_EQ(b, (std::vector<std::int64_t>{2, 1, 0}));
  EXPECT_EQ(free_list, (std::vector<std::int64_t>{5, 4, 3}));
}

TEST(KVCacheBlockTable, RoomIsTheLimitOrWhatTheBlocksAllow) {
  // Contiguous: up to the limit.
  EXPECT_EQ(detail::room_for(kPaged, false, 12, 5, 0), 7);
  // Paged: the rest of the held blocks plus the free blocks, capped by the limit.
  EXPECT_EQ(detail::room_for(kPaged, true, 12, 5, 0), 3);   // 5 rows in 2 blocks of 4
  EXPECT_EQ(detail::room_for(kPaged, true, 12, 5, 1), 7);
  EXPECT_EQ(detail::room_for(kPaged, true, 12, 5, 4), 7);   // the limit
  EXPECT_EQ(detail::room_for(kPaged, true, 12, 0, 2), 8);
  EXPECT_EQ(detail::room_for(kPaged, true, 12, 12, 6), 0);
}

}  // namespace
}  // namespace attnkit
