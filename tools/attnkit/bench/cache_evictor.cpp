// A buffer larger than the caches, written between timed calls.
#include "bench/cache_evictor.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace attnkit::bench {

namespace {

constexpr std::size_t kMinimumBytes = std::size_t{64} << 20;  // when the OS does not report the L3 size
constexpr std::size_t kCacheMultiple = 2;  // twice the cache: LRU-like replacement then keeps none of K and V

std::size_t last_level_cache_bytes() {
#if defined(_SC_LEVEL3_CACHE_SIZE)
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (l3 > 0) return static_cast<std::size_t>(l3);
#endif
  return 0;
}

}  // namespace

CacheEvictor::CacheEvictor() : buffer_(std::max(kMinimumBytes, kCacheMultiple * last_level_cache_bytes()), 1) {}

void CacheEvictor::evict() {
  ++value_;  // a new value each time, so the writes cannot be elided
  std::memset(buffer_.data(), value_, buffer_.size());
}

}  // namespace attnkit::bench
