// attnkit's thread count for one scope of the benchmark.
#pragma once

#include "attnkit/attention.hpp"

namespace attnkit::bench {

// Sets attnkit::set_num_threads for a scope and restores the default after it, even on an exception.
class AttnkitThreads {
 public:
  explicit AttnkitThreads(int threads) { set_num_threads(threads); }
  ~AttnkitThreads() { set_num_threads(0); }
  AttnkitThreads(const AttnkitThreads&) = delete;
  AttnkitThreads& operator=(const AttnkitThreads&) = delete;
};

}  // namespace attnkit::bench
