// Runs the batched decoding cases (bench/batch_decode_cases.hpp): fills a paged KV cache with the
// case's sequences in its dtype and times one attnkit::attend step over all of them, the caches
// evicted before each call (K and V arrive cold in generation). A cache is kept for the next case
// of the same sequences and dtype (the other thread counts).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "attnkit/kv_cache.hpp"
#include "attnkit/options.hpp"
#include "bench/batch_decode_cases.hpp"
#include "bench/cache_evictor.hpp"
#include "bench/timing.hpp"

namespace attnkit::bench {

struct BatchDecodeResult {
  BatchDecodeCase batch_case;
  std::string kernel;                 // the kernel attnkit ran
  std::optional<std::string> target;  // its SIMD target; none for the reference
  Timing step;                        // one attend call over every sequence
};

class BatchDecodeRunner {
 public:
  BatchDecodeRunner(TimingPlan timing, Kernel kernel) : timing_(timing), kernel_(kernel) {}
  BatchDecodeResult run(const BatchDecodeCase& c);

 private:
  void fill(const BatchDecodeCase& c);  // cache_ and ids_ for c's sequences and dtype

  TimingPlan timing_;
  Kernel kernel_;
  std::unique_ptr<CacheEvictor> evictor_;
  std::unique_ptr<KVCache> cache_;
  std::vector<KVCache::SequenceId> ids_;
  std::string filled_;  // the group and dtype cache_ holds
};

}  // namespace attnkit::bench
