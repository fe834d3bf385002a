// std::thread fan-out for the benchmark's loops.
#include "bench/thread_team.hpp"

#include <atomic>
#include <thread>
#include <vector>

namespace attnkit::bench {

void run_on_threads(int threads, const std::function<void(int thread)>& body) {
  std::vector<std::thread> helpers;
  helpers.reserve(static_cast<std::size_t>(threads > 1 ? threads - 1 : 0));
  for (int t = 1; t < threads; ++t) helpers.emplace_back(body, t);
  body(0);
  for (std::thread& h : helpers) h.join();
}

void for_each_task(int threads, std::int64_t tasks, const std::function<void(int thread, std::int64_t task)>& body) {
  std::atomic<std::int64_t> next{0};
  run_on_threads(threads, [&](int thread) {
    for (std::int64_t task = next.fetch_add(1); task < tasks; task = next.fetch_add(1)) body(thread, task);
  });
}

}  // namespace attnkit::bench
