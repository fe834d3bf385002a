// The persistent pool: workers wait on a condition variable for a new job generation.
#include "core/thread_pool.hpp"

#include <pthread.h>

#include <algorithm>
#include <chrono>

namespace attnkit::detail {
namespace {

// True on every pool worker, and on a caller while its job runs: a try_run from there is nested.
thread_local bool t_inside_job = false;

// Marks the calling thread as inside a job for its lifetime.
class InsideJob {
 public:
  InsideJob() { t_inside_job = true; }
  ~InsideJob() { t_inside_job = false; }
  InsideJob(const InsideJob&) = delete;
  InsideJob& operator=(const InsideJob&) = delete;
};

// Waits until done() or for about `microseconds`, without sleeping; returns done(). Tells the core
// that this is a wait (pause) at each look, and yields it every 64 looks (about a microsecond).
template <class Done>
bool wait_briefly(Done&& done, int microseconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(microseconds);
  for (int look = 1;; ++look) {
    if (done()) return true;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    if (look % 64 == 0) {
      if (std::chrono::steady_clock::now() >= until) return done();
      std::this_thread::yield();
    }
  }
}

ThreadPool* g_pool = nullptr;  // set once by instance(), replaced in a fork()ed child
// Pools abandoned by fork(), kept reachable so that leak checkers do not report them.
std::vector<ThreadPool*>* g_abandoned_pools = nullptr;

// fork() copies the pool but not its workers: a child would wait for them forever. It gets a new
// pool; the old one is abandoned, not destroyed, since destroying a std::thread that cannot be
// joined terminates the process. Runs in the child, which has a single thread.
void replace_pool_in_child() {
  if (g_abandoned_pools == nullptr) g_abandoned_pools = new std::vector<ThreadPool*>;
  g_abandoned_pools->push_back(g_pool);
  g_pool = new ThreadPool;
}

}  // namespace

ThreadPool& ThreadPool::instance() {
  // The pool is deliberately never deleted (see the header); `owner` joins its workers at exit
  // instead, so that no thread outlives main's statics and sanitizers see a clean shutdown.
  static const struct Owner {
    Owner() {
      g_pool = new ThreadPool;
      pthread_atfork(nullptr, nullptr, replace_pool_in_child);
    }
    ~Owner() { g_pool->shutdown(); }
  } owner;
  return *g_pool;
}

ThreadPool::~ThreadPool() { shutdown(); }

bool ThreadPool::try_run(int threads, int participants, const Job& job) {
  // Checked before locking: a nested call on the thread that holds run_mutex_ must not lock it again.
  if (t_inside_job) return false;
  const std::unique_lock run(run_mutex_, std::try_to_lock);
  if (!run.owns_lock() || closed_) return false;

  const int width = static_cast<int>(workers_.size()) + 1;
  if (threads < width) resize(threads);
  else if (participants > width) resize(std::min(threads, participants));
  participants = std::clamp(participants, 1, static_cast<int>(workers_.size()) + 1);
  const InsideJob inside;
  if (participants == 1) {
    job(0, 1);
    return true;
  }
  start_job(participants, job);
  try {
    job(0, participants);
  } catch (...) {
    wait_for_workers();  // they still read `job`
    throw;
  }
  wait_for_workers();
  return true;
}

void ThreadPool::shutdown() {
  // exit() called from inside a job: the job can never finish, so leave the workers to the OS.
  if (t_inside_job) return;
  const std::lock_guard run(run_mutex_);
  resize(1);
  closed_ = true;
}

int ThreadPool::width() const {
  const std::lock_guard state(state_mutex_);
  return width_;
}

void ThreadPool::resize(int threads) {
  const int current = static_cast<int>(workers_.size()) + 1;
  threads = std::max(threads, 1);
  if (threads > current) grow(threads);
  if (threads < current) shrink(threads);
}

void ThreadPool::grow(int threads) {
  {
    const std::lock_guard state(state_mutex_);
    width_ = threads;  // before the new workers look at it
  }
  for (int index = static_cast<int>(workers_.size()) + 1; index < threads; ++index) {
    try {
      // A new worker has seen every job so far: it waits for the next generation.
      workers_.emplace_back(&ThreadPool::worker_loop, this, index, generation_.load());
    } catch (...) {  // the system refused a thread (or its bookkeeping): run narrower from now on
      const std::lock_guard state(state_mutex_);
      width_ = static_cast<int>(workers_.size()) + 1;
      most_threads_.store(width_, std::memory_order_relaxed);
      return;
    }
  }
}

void ThreadPool::shrink(int threads) {
  {
    const std::lock_guard state(state_mutex_);
    width_ = threads;
  }
  wake_.notify_all();
  const auto first_leaving = workers_.begin() + (threads - 1);
  for (auto worker = first_leaving; worker != workers_.end(); ++worker) worker->join();
  workers_.erase(first_leaving, workers_.end());
}

void ThreadPool::start_job(int participants, const Job& job) {
  {
    const std::lock_guard state(state_mutex_);
    job_ = &job;
    participants_ = participants;
    pending_ = participants - 1;
    ++generation_;
  }
  wake_.notify_all();
}

void ThreadPool::wait_for_workers() {
  wait_briefly([this] { return pending_.load(std::memory_order_acquire) == 0; }, kSpinMicroseconds);
  std::unique_lock state(state_mutex_);
  done_.wait(state, [this] { return pending_ == 0; });
  job_ = nullptr;
}

void ThreadPool::worker_loop(int index, std::uint64_t seen_generation) {
  t_inside_job = true;  // for good: anything a worker runs is inside a job
  std::unique_lock state(state_mutex_);
  for (;;) {
    // A new job often follows at once (decoding calls attention for every layer and token). A change
    // of width is seen here only when the wait ends: shrink() waits that long at most.
    state.unlock();
    wait_briefly([&] { return generation_.load(std::memory_order_acquire) != seen_generation; }, kSpinMicroseconds);
    state.lock();
    wake_.wait(state, [&] { return index >= width_ || generation_ != seen_generation; });
    if (index >= width_) return;
    seen_generation = generation_;
    if (index >= participants_) continue;  // a narrower job than the pool
    const Job& job = *job_;
    const int participants = participants_;
    state.unlock();
    job(index, participants);
    state.lock();
    if (--pending_ == 0) done_.notify_one();
  }
}

}  // namespace attnkit::detail
