// Evicts K and V from the caches between timed decode calls. In generation, a layer's KV cache is
// read once per token with every other layer's traffic in between, so it arrives cold; at m = 4096 a
// bf16 K and V (17 MB) would otherwise stay in a 32 MiB L3 across repetitions and the "bandwidth"
// would be the cache's.
#pragma once

#include <cstddef>
#include <vector>

namespace attnkit::bench {

class CacheEvictor {
 public:
  CacheEvictor();     // allocates and touches a buffer of twice the last-level cache (at least 64 MiB)
  void evict();       // writes the whole buffer, replacing whatever the caches held
  std::size_t bytes() const { return buffer_.size(); }

 private:
  std::vector<unsigned char> buffer_;
  unsigned char value_ = 0;
};

}  // namespace attnkit::bench
