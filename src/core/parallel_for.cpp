// The thread count setting, and the parallel loops on the persistent pool.
#include "core/parallel_for.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

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

// Holds each arriving thread until `participants` threads have arrived. Sleeps rather than spins,
// like the pool's workers; allocates nothing, so arriving never throws.
class Barrier {
 public:
  void arrive_and_wait(int participants) noexcept {
    std::unique_lock lock(mutex_);
    const std::uint64_t generation = generation_;
    if (++arrived_ == participants) {
      arrived_ = 0;
      ++generation_;
      lock.unlock();
      all_arrived_.notify_all();
      return;
    }
    all_arrived_.wait(lock, [&] { return generation_ != generation; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable all_arrived_;
  int arrived_ = 0;
  std::uint64_t generation_ = 0;
};

// The loops of one parallel_loops call, shared by its threads: the next index of each loop, the
// first error, and the barrier between the preparation and the loops and between loops.
class SharedLoops {
 public:
  SharedLoops(const std::function<void()>& prepare_thread, std::initializer_list<ParallelLoop> loops)
      : prepare_thread_(prepare_thread), loops_(loops), next_(loops.size()) {}

  // One thread's share, out of `participants` threads: its preparation, then, loop by loop, indices
  // until none is left or something has failed. Every thread passes every barrier, failed or not,
  // so none waits forever. The pool's join ends the last loop.
  void work(int participants) noexcept {
    if (prepare_thread_) {
      attempt([&] { prepare_thread_(); });
      barrier_.arrive_and_wait(participants);  // no task starts before every thread is prepared
    }
    bool first = true;
    for (std::size_t l = 0; l < loops_.size(); ++l) {
      const ParallelLoop& loop = loops_.begin()[l];
      if (loop.count <= 0) continue;  // an empty loop needs no barrier
      if (!first) barrier_.arrive_and_wait(participants);  // the loops before are complete on every thread
      first = false;
      for (std::int64_t t = take(l); t < loop.count && !failed(); t = take(l)) attempt([&] { loop.body(t); });
    }
  }

  void rethrow_first_error() const {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  template <class Step>
  void attempt(Step&& step) noexcept {
    try {
      step();
    } catch (...) {
      const std::lock_guard lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
      failed_.store(true, std::memory_order_relaxed);
    }
  }
  // Relaxed: a failure seen late only costs a task; the barriers and the join order the rest.
  bool failed() const noexcept { return failed_.load(std::memory_order_relaxed); }
  // Relaxed: an index only needs to be unique; the barriers and the join publish the tasks' writes.
  std::int64_t take(std::size_t loop) noexcept { return next_[loop].fetch_add(1, std::memory_order_relaxed); }

  const std::function<void()>& prepare_thread_;
  const std::initializer_list<ParallelLoop> loops_;
  std::vector<std::atomic<std::int64_t>> next_;
  Barrier barrier_;
  std::atomic<bool> failed_{false};  // a hint to stop early; error_ holds the truth
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

// All on the calling thread: the preparation, then every loop in order.
void run_serially(const std::function<void()>& prepare_thread, std::initializer_list<ParallelLoop> loops) {
  if (prepare_thread) prepare_thread();
  for (const ParallelLoop& loop : loops) {
    for (std::int64_t t = 0; t < loop.count; ++t) loop.body(t);
  }
}

}  // namespace

void parallel_loops(const std::function<void()>& prepare_thread, std::initializer_list<ParallelLoop> loops) {
  const int threads = num_threads();
  std::int64_t widest = 0;
  for (const ParallelLoop& loop : loops) widest = std::max(widest, loop.count);
  const int participants = static_cast<int>(std::min<std::int64_t>(threads, widest));
  if (participants <= 1) return run_serially(prepare_thread, loops);
  SharedLoops shared(prepare_thread, loops);
  // The pool may run fewer participants than asked for: each is told how many run.
  if (!ThreadPool::instance().try_run(threads, participants, [&](int, int running) { shared.work(running); })) {
    return run_serially(prepare_thread, loops);  // nested, or the pool is busy with another thread's loop
  }
  shared.rethrow_first_error();
}

void parallel_for(std::int64_t count, const std::function<void(std::int64_t)>& body) {
  parallel_loops(nullptr, {{count, body}});
}

}  // namespace detail
}  // namespace attnkit
