// Thread count setting and the reference kernels' fork-join.
#include "core/parallel_for.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "attnkit/attention.hpp"

namespace attnkit {
namespace {

std::atomic<int> g_requested_threads{0};  // 0 = default

int default_threads() {
  if (const char* env = std::getenv("ATTNKIT_NUM_THREADS")) {
    char* end = nullptr;
    const long value = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && value > 0 && value <= 4096) return static_cast<int>(value);
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace

void set_num_threads(int n) { g_requested_threads.store(n > 0 ? n : 0, std::memory_order_relaxed); }

int num_threads() {
  const int requested = g_requested_threads.load(std::memory_order_relaxed);
  return requested > 0 ? requested : default_threads();
}

namespace detail {

void parallel_for(std::int64_t count, const std::function<void(std::int64_t)>& body) {
  const std::int64_t workers = std::min<std::int64_t>(num_threads(), count);
  if (workers <= 1) {
    for (std::int64_t t = 0; t < count; ++t) body(t);
    return;
  }
  std::atomic<std::int64_t> next{0};
  std::exception_ptr first_error;
  std::mutex error_mutex;
  auto work = [&] {
    for (std::int64_t t = next.fetch_add(1); t < count; t = next.fetch_add(1)) {
      try {
        body(t);
      } catch (...) {
        const std::lock_guard lock(error_mutex);
        if (!first_error) first_error = std::current_exception();
      }
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(workers - 1));
  for (std::int64_t w = 1; w < workers; ++w) threads.emplace_back(work);
  work();  // the calling thread is worker 0
  for (std::thread& t : threads) t.join();
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace detail
}  // namespace attnkit
