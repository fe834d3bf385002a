// A persistent pool of worker threads for attnkit's parallel loops (core/parallel_for.hpp builds on
// it; kernels call those functions, not the pool).
//
// Between jobs, workers sleep on a condition variable, after waiting a short while (kSpinMicroseconds)
// for the next job without sleeping, and the caller likewise waits a short while for the workers to
// finish before it sleeps. On a VM, waking a sleeping thread can take longer than a short call's
// whole work (on a 2-vCPU AMD EPYC, a decoding step over 1024 keys took 77–97 µs on 2 threads
// against 62 µs on 1; 40–55 µs with the waits), and a decoding engine calls attention back to
// back. The waits are bounded and give the core away every microsecond or so
// (std::this_thread::yield), so that on a machine whose cores are shared with other processes, or
// with more threads than cores, the waiting threads do not keep the working ones from running
// (spinning without end ran 5× slower with 8 threads on 2 cores). See docs/tuning.md, "Threads and
// the pool".
//
// One job runs at a time. A call that finds the pool busy, or that comes from inside a job, is told
// so at once (try_run returns false) instead of waiting, so nested and concurrent calls can never
// deadlock or oversubscribe the cores: the caller then runs its work itself.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "attnkit/attention.hpp"

namespace attnkit::detail {

class ThreadPool {
 public:
  // How long a worker waits for the next job, and the caller for the workers, before sleeping.
  static constexpr int kSpinMicroseconds = 100;
  // One participant's share of a job, told how many participants the job has (all of them run at
  // once, each on its own thread, so they may wait for one another); participant 0 is the calling
  // thread. Must not throw: a job catches its tasks' exceptions itself (see parallel_for).
  using Job = std::function<void(int participant, int participants)>;

  // The process-wide pool. Its workers are created on first use and joined at process exit; the
  // object itself is never destroyed, so a call made during static destruction still finds it (and
  // runs on the calling thread alone, as after shutdown()). A fork()ed child gets a new pool.
  static ThreadPool& instance();

  ThreadPool() = default;
  ~ThreadPool();  // shutdown()
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Unless the pool is busy with another caller's job, the calling thread is inside a job of any
  // pool, or the pool is shut down: makes the pool min(threads, participants) wide if it is
  // narrower (the caller included: it keeps that many − 1 workers; no thread is started that the
  // job would leave idle), or `threads` wide if it is wider (workers joined), runs job(p, participants)
  // once for each participant p in [0, participants) — p = 0 on the calling thread, p > 0 on worker p —
  // waits for all of them and returns true. Otherwise returns false at once, having run nothing.
  // `participants` is clamped to [1, the pool's width] (narrower than asked only if the system
  // refused to create a thread).
  bool try_run(int threads, int participants, const Job& job);

  // Joins the workers; try_run returns false from then on. Waits for a running job to finish.
  void shutdown();

  // Threads the pool runs a job on, the caller included (1 before first use).
  int width() const;

  // The widest the pool can be: kMaxThreads, or the width it had when the system refused it a thread.
  int most_threads() const { return most_threads_.load(std::memory_order_relaxed); }

 private:
  void resize(int threads);  // the caller holds run_mutex_
  void grow(int threads);
  void shrink(int threads);
  void start_job(int participants, const Job& job);
  void wait_for_workers();
  void worker_loop(int index, std::uint64_t seen_generation);

  std::mutex run_mutex_;             // held by the caller of try_run for the whole job
  std::vector<std::thread> workers_;  // worker p is workers_[p − 1]; changed under run_mutex_ only
  bool closed_ = false;              // under run_mutex_

  // Under state_mutex_: what the workers read.
  mutable std::mutex state_mutex_;
  std::condition_variable wake_;  // a new job, or a change of width
  std::condition_variable done_;  // the last worker of a job finished
  std::atomic<int> most_threads_{kMaxThreads};
  int width_ = 1;                 // workers with index ≥ width_ exit
  // Written under state_mutex_; atomic so that the short waits can read them without it.
  std::atomic<std::uint64_t> generation_{0};  // incremented once per job
  const Job* job_ = nullptr;
  int participants_ = 0;
  std::atomic<int> pending_{0};  // workers of the current job that have not finished
};

}  // namespace attnkit::detail
