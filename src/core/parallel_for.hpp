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
#pragma once

#include <cstdint>
#include <functional>

namespace attnkit::detail {

// Runs body(t) for every t in [0, count). Threads take indices one at a time as they become free,
// so tasks of uneven cost balance; use it for coarse tasks (a head, a block of rows), since taking
// an index costs an atomic increment shared by all threads.
void parallel_for(std::int64_t count, const std::function<void(std::int64_t)>& body);

}  // namespace attnkit::detail
