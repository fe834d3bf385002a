// Plain std::thread fan-out for the benchmark's own loops (ceilings and baselines). Threads are
// created per call: a call here lasts milliseconds to minutes, so the ~50 µs of creating a thread is
// noise, and the benchmark stays independent of attnkit's own thread pool.
#pragma once

#include <cstdint>
#include <functional>

namespace attnkit::bench {

// Runs body(thread) on `threads` threads (the calling thread is one of them) and joins them all.
// Bodies must not throw: an exception escaping a std::thread ends the process.
void run_on_threads(int threads, const std::function<void(int thread)>& body);

// Runs body(thread, task) for every task in [0, tasks) on `threads` threads, handing out tasks in
// order from a shared counter, so uneven tasks (causal rows) still balance across the threads.
void for_each_task(int threads, std::int64_t tasks, const std::function<void(int thread, std::int64_t task)>& body);

}  // namespace attnkit::bench
