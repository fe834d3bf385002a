// Memory bandwidth: a copy between two buffers far larger than the caches, and a read of one, each
// split across threads. Decoding only reads (K and V), and the two need not agree: on a Zen 3 VM one
// thread read 15–17 GB/s against 22–23 copied, and two threads read 22–24 against 14–18 copied, so
// decode figures are given over both. The read is the faster of two loops: plain loads, and loads
// that also request each stream's line 2 KiB on (kReadAhead): on an Intel Xeon (model 207), one
// thread read 1.11-1.15x as fast with the requests, two 1.04-1.08x, and decoding, which requests its
// rows ahead, had read faster than the plain loop's "ceiling".
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "bench/ceilings.hpp"
#include "bench/read_loops.hpp"
#include "bench/thread_team.hpp"
#include "bench/timing.hpp"

namespace attnkit::bench {

namespace {

constexpr std::size_t kPageBytes = 4096;  // thread slices start on page boundaries
constexpr double kGiga = 1e9;
constexpr int kBytesMovedPerByteCopied = 2;  // one read and one write
constexpr std::size_t kReadAhead = 2048;     // bytes ahead each stream's lines are requested
                                             // (1 to 4 KiB measured alike on that Xeon; 512 less)

struct Buffer {
  explicit Buffer(std::size_t bytes) : data(new std::byte[bytes]), size(bytes) {
    // Touch every page now: a first touch can cost ~10 µs per page (measured on a cloud VM) and must
    // not be timed.
    std::memset(data.get(), 1, size);
  }
  std::unique_ptr<std::byte[]> data;
  std::size_t size;
};

// body(begin, end) on `threads` threads, each with one page-aligned slice [begin, end) of `size` bytes.
template <class Body>
void on_page_slices(std::size_t size, int threads, Body&& body) {
  const std::size_t pages = size / kPageBytes;
  const auto parts = static_cast<std::size_t>(threads);
  const std::size_t pages_per_thread = (pages + parts - 1) / parts;
  run_on_threads(threads, [&](int thread) {
    const std::size_t begin = std::min(size, static_cast<std::size_t>(thread) * pages_per_thread * kPageBytes);
    const std::size_t end = std::min(size, begin + pages_per_thread * kPageBytes);
    body(begin, end);
  });
}

// Copies src into dst with `threads` threads, each taking one page-aligned slice.
void parallel_copy(const Buffer& src, Buffer& dst, int threads) {
  on_page_slices(src.size, threads, [&](std::size_t begin, std::size_t end) {
    std::memcpy(dst.data.get() + begin, src.data.get() + begin, end - begin);
  });
}

// Bytes moved per second by `call(threads)` for each thread count: the median of `repeats` timed calls.
template <class Call>
std::vector<double> rates_of(const std::vector<int>& threads, int repeats, double bytes_moved, Call&& call) {
  std::vector<double> rates;
  for (int t : threads) {
    const Timing timing = time_calls({.repeats = repeats}, [&] { call(t); });
    rates.push_back(bytes_moved / timing.median_seconds / kGiga);
  }
  return rates;
}

// The read loop for this CPU: AVX2 where it has it (__builtin_cpu_supports also checks that the OS
// saves the wider registers), else 128-bit vectors.
std::uint64_t read_loop(const std::byte* begin, std::size_t bytes, std::size_t ahead) {
#if defined(ATTNKIT_BENCH_X86)
  if (__builtin_cpu_supports("avx2")) return read_loop_avx2(begin, bytes, ahead);
#endif
  return read_loop_generic(begin, bytes, ahead);
}

// Reads src with `threads` threads, each its own page-aligned slice (as two streams, bench/read_loops.hpp);
// what they read goes to `sink`, so that the reads cannot be dropped.
void parallel_read(const Buffer& src, int threads, std::size_t ahead, std::atomic<std::uint64_t>& sink) {
  on_page_slices(src.size, threads, [&](std::size_t begin, std::size_t end) {
    sink.fetch_add(read_loop(src.data.get() + begin, end - begin, ahead), std::memory_order_relaxed);
  });
}

}  // namespace

std::vector<double> measure_read_bandwidth(const std::vector<int>& threads, int repeats, std::size_t bytes) {
  const Buffer src(bytes);
  std::atomic<std::uint64_t> sink{0};
  std::vector<double> rates = rates_of(threads, repeats, static_cast<double>(bytes), [&](int t) { parallel_read(src, t, 0, sink); });
  const std::vector<double> requesting =
      rates_of(threads, repeats, static_cast<double>(bytes), [&](int t) { parallel_read(src, t, kReadAhead, sink); });
  for (std::size_t i = 0; i < rates.size(); ++i) rates[i] = std::max(rates[i], requesting[i]);
  return rates;
}

std::vector<double> measure_copy_bandwidth(const std::vector<int>& threads, int repeats, std::size_t bytes) {
  const Buffer src(bytes);
  Buffer dst(bytes);
  return rates_of(threads, repeats, static_cast<double>(kBytesMovedPerByteCopied * bytes),
                  [&](int t) { parallel_copy(src, dst, t); });
}

}  // namespace attnkit::bench
