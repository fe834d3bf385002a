// The thread count setting, and the parallel loops on the persistent pool.
#include "core/parallel_for.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "attnkit/attention.hpp"
#include "attnkit/error.hpp"
#include "core/thread_pool.hpp"

namespace attnkit {
namespace {

std::atomic<int> g_requested_threads{0};  // 0 = default

int hardware_threads() {
  // Asked once: libstdc++ reads /sys (a system call) on every hardware_concurrency().
  static const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return threads;
}

// ATTNKIT_NUM_THREADS if it is a whole number in [1, kMaxThreads], else hardware concurrency. Read
// on every call, so that a change of the variable takes effect like set_num_threads does.
int default_threads() {
  if (const char* env = std::getenv("ATTNKIT_NUM_THREADS")) {
    char* end = nullptr;
    const long value = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && value > 0 && value <= kMaxThreads) return static_cast<int>(value);
  }
  return hardware_threads();
}

}  // namespace

void set_num_threads(int n) {
  if (n > kMaxThreads) {
    throw Error(ErrorCode::invalid_argument, "set_num_threads: n = " + std::to_string(n) +
                                                 " is more threads than attnkit runs (at most kMaxThreads = " +
                                                 std::to_string(kMaxThreads) + "; 0 restores the default)");
  }
  g_requested_threads.store(n > 0 ? n : 0, std::memory_order_relaxed);
}

int num_threads() {
  const int requested = g_requested_threads.load(std::memory_order_relaxed);
  return std::min(requested > 0 ? requested : default_threads(), detail::ThreadPool::instance().most_threads());
}

namespace detail {
namespace {

void run_serially(std::int64_t count, const std::function<void(std::int64_t)>& body) {
  for (std::int64_t t = 0; t < count; ++t) body(t);
}

// One parallel_for shared by its threads: the next index to take, and the first error.
class SharedLoop {
 public:
  SharedLoop(std::int64_t count, const std::function<void(std::int64_t)>& body) : count_(count), body_(body) {}

  // One thread's share: takes indices until none is left or a task has failed.
  void work() noexcept {
    for (std::int64_t t = take(); t < count_ && !failed_.load(std::memory_order_relaxed); t = take()) {
      try {
        body_(t);
      } catch (...) {
        record(std::current_exception());
      }
    }
  }

  void rethrow_first_error() const {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  // Relaxed: the index only needs to be unique; the pool's join publishes the tasks' writes.
  std::int64_t take() noexcept { return next_.fetch_add(1, std::memory_order_relaxed); }

  void record(std::exception_ptr error) noexcept {
    const std::lock_guard lock(error_mutex_);
    if (!error_) error_ = std::move(error);
    failed_.store(true, std::memory_order_relaxed);
  }

  const std::int64_t count_;
  const std::function<void(std::int64_t)>& body_;
  std::atomic<std::int64_t> next_{0};
  std::atomic<bool> failed_{false};  // a hint to stop early; error_ holds the truth
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

}  // namespace

void parallel_for(std::int64_t count, const std::function<void(std::int64_t)>& body) {
  const int threads = num_threads();
  const int participants = static_cast<int>(std::min<std::int64_t>(threads, count));
  if (participants <= 1) return run_serially(count, body);
  SharedLoop loop(count, body);
  if (!ThreadPool::instance().try_run(threads, participants, [&](int) { loop.work(); })) {
    return run_serially(count, body);  // nested, or the pool is busy with another thread's loop
  }
  loop.rethrow_first_error();
}

}  // namespace detail
}  // namespace attnkit
