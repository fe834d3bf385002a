// Memory bandwidth: a copy between two buffers far larger than the caches, split across threads.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <vector>

#include "bench/ceilings.hpp"
#include "bench/thread_team.hpp"
#include "bench/timing.hpp"

namespace attnkit::bench {

namespace {

constexpr std::size_t kPageBytes = 4096;  // thread slices start on page boundaries
constexpr double kGiga = 1e9;
constexpr int kBytesMovedPerByteCopied = 2;  // one read and one write

struct Buffer {
  explicit Buffer(std::size_t bytes) : data(new std::byte[bytes]), size(bytes) {
    // Touch every page now: a first touch costs ~10 µs per page on these VMs and must not be timed.
    std::memset(data.get(), 1, size);
  }
  std::unique_ptr<std::byte[]> data;
  std::size_t size;
};

// Copies src into dst with `threads` threads, each taking one page-aligned slice.
void parallel_copy(const Buffer& src, Buffer& dst, int threads) {
  const std::size_t pages = src.size / kPageBytes;
  const auto parts = static_cast<std::size_t>(threads);
  const std::size_t pages_per_thread = (pages + parts - 1) / parts;
  run_on_threads(threads, [&](int thread) {
    const std::size_t begin = std::min(src.size, static_cast<std::size_t>(thread) * pages_per_thread * kPageBytes);
    const std::size_t end = std::min(src.size, begin + pages_per_thread * kPageBytes);
    std::memcpy(dst.data.get() + begin, src.data.get() + begin, end - begin);
  });
}

}  // namespace

std::vector<double> measure_copy_bandwidth(const std::vector<int>& threads, int repeats, std::size_t bytes) {
  const Buffer src(bytes);
  Buffer dst(bytes);
  std::vector<double> rates;
  for (int t : threads) {
    const Timing timing = time_calls({.repeats = repeats}, [&] { parallel_copy(src, dst, t); });
    rates.push_back(static_cast<double>(kBytesMovedPerByteCopied * bytes) / timing.median_seconds / kGiga);
  }
  return rates;
}

}  // namespace attnkit::bench
