// A parallel loop over independent tasks, on the persistent pool (core/thread_pool.hpp). Each task
// index runs exactly once, on some thread; tasks must write disjoint memory, so that results never
// depend on the thread count.
//
// It uses up to attnkit::num_threads() threads, the calling thread included. It runs
// every task on the calling thread, one after another, when there is nothing to share (one thread or
// one task), when called from inside a task (a nested loop: the outer loop already has the cores),
// or when another thread's loop is using the pool (it does not wait for it). So tasks must never
// wait for one another: they may all run on one thread.
//
// The first exception a task throws is rethrown on the calling thread once every running task has
// finished; tasks not yet started by then may be skipped.
//
// parallel_loops is the kernels' form: several dependent loops, with a per-thread preparation that
// all threads finish before any task starts.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>

namespace attnkit::detail {

// Runs body(t) for every t in [0, count). Threads take indices one at a time as they become free,
// so tasks of uneven cost balance; use it for coarse tasks (a head, a block of rows), since taking
// an index costs an atomic increment shared by all threads.
void parallel_for(std::int64_t count, const std::function<void(std::int64_t)>& body);

// One loop of parallel_loops: body(t) for every t in [0, count).
struct ParallelLoop {
  std::int64_t count;
  std::function<void(std::int64_t)> body;
};

// Runs the loops in order on one set of threads, each loop finished before the next starts, as
// parallel_for would one after another; but first runs prepare_thread() on every thread that will
// run a task, and starts no task until all of them have returned. A kernel reserves each thread's
// scratch there, so that its tasks never allocate: memory that runs out then runs out before any
// task has written an output. If prepare_thread or a task throws, no further task starts, and the
// first exception is rethrown once every running task has finished.
void parallel_loops(const std::function<void()>& prepare_thread, std::initializer_list<ParallelLoop> loops);

}  // namespace attnkit::detail
