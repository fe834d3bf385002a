// The read loop with the compiler's 128-bit vectors and the build's default flags (bench/read_loops.hpp).
#include <cstring>

#include "bench/read_loops.hpp"

namespace attnkit::bench {

std::uint64_t read_loop_generic(const std::byte* begin, std::size_t bytes, std::size_t ahead) {
  using Words = std::uint64_t __attribute__((vector_size(16)));
  constexpr std::size_t kStep = 64;  // bytes per stream per step: a cache line as four vectors
  const std::size_t half = bytes / 2;
  const std::byte* second = begin + half;
  Words sums[8] = {};
  for (std::size_t at = 0; at + kStep <= half; at += kStep) {
    if (ahead != 0 && at + ahead < half) {
      __builtin_prefetch(begin + at + ahead, 0, 2);  // into L2 (prefetcht1 on x86)
      __builtin_prefetch(second + at + ahead, 0, 2);
    }
    for (int v = 0; v < 4; ++v) {
      Words first_words, second_words;
      std::memcpy(&first_words, begin + at + v * sizeof(Words), sizeof(Words));
      std::memcpy(&second_words, second + at + v * sizeof(Words), sizeof(Words));
      sums[v] += first_words;
      sums[4 + v] += second_words;
    }
  }
  Words total = {};
  for (const Words& s : sums) total += s;
  return total[0] + total[1];
}

}  // namespace attnkit::bench
