#include "kv_cache/block_table.hpp"

#include <algorithm>

namespace attnkit::detail {

void fill_free_list(std::vector<std::int64_t>& list, std::int64_t count) {
  list.clear();
  for (std::int64_t i = count - 1; i >= 0; --i) list.push_back(i);
}

std::int64_t blocks_to_grow(const CacheGeometry& geometry, bool paged, std::int64_t length, std::int64_t t) {
  return paged ? geometry.blocks_for(length + t) - geometry.blocks_for(length) : 0;
}

void take_blocks(const CacheGeometry& geometry, std::span<std::int64_t> table, std::int64_t length, std::int64_t t,
                 std::vector<std::int64_t>& free_list) {
  for (std::int64_t i = geometry.blocks_for(length); i < geometry.blocks_for(length + t); ++i) {
    table[static_cast<std::size_t>(i)] = free_list.back();
    free_list.pop_back();
  }
}

void release_blocks(std::span<std::int64_t> table, std::vector<std::int64_t>& free_list) {
  for (std::int64_t& block : table) {
    if (block >= 0) free_list.push_back(block);
    block = -1;
  }
}

std::int64_t room_for(const CacheGeometry& geometry, bool paged, std::int64_t max_sequence_length, std::int64_t length,
                      std::int64_t free_blocks) {
  const std::int64_t to_limit = max_sequence_length - length;
  if (!paged) return to_limit;
  const std::int64_t in_held_blocks = geometry.blocks_for(length) * geometry.block_size - length;
  return std::min(to_limit, in_held_blocks + free_blocks * geometry.block_size);
}

}  // namespace attnkit::detail
