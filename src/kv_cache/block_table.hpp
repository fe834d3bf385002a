// The KV cache's allocation: a free list of blocks (or, contiguous, of slots) and each sequence's
// row of the block table, which lists its blocks in order, −1 where it holds none. Blocks are taken
// from the back of the free list and returned to it, so a cache that was never freed hands them out
// in increasing order and each sequence's rows lie in order in the pools.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kv_cache/geometry.hpp"

namespace attnkit::detail {

// `list` = count − 1, ..., 1, 0: taken from the back, 0 comes first. `list` keeps its capacity.
void fill_free_list(std::vector<std::int64_t>& list, std::int64_t count);

// Paged: new blocks a sequence of `length` rows needs to grow by `t`. Contiguous: 0 (the slot is
// held from the start).
std::int64_t blocks_to_grow(const CacheGeometry& geometry, bool paged, std::int64_t length, std::int64_t t);

// Gives `table` (a sequence of `length` rows) the blocks it needs to grow by `t`, from the back of
// `free_list`, which must hold them (blocks_to_grow says how many).
void take_blocks(const CacheGeometry& geometry, std::span<std::int64_t> table, std::int64_t length, std::int64_t t,
                 std::vector<std::int64_t>& free_list);

// Returns every block `table` holds to `free_list` and marks its entries unused (−1).
void release_blocks(std::span<std::int64_t> table, std::vector<std::int64_t>& free_list);

// How many more rows a sequence of `length` rows can take: up to max_sequence_length, and (paged)
// what the free blocks plus the room left in its last block allow.
std::int64_t room_for(const CacheGeometry& geometry, bool paged, std::int64_t max_sequence_length, std::int64_t length,
                      std::int64_t free_blocks);

}  // namespace attnkit::detail
