// Wall-clock timing for the benchmark: a warm-up call first, then the median of several calls, all
// with std::chrono::steady_clock. Inputs and workspaces are the caller's job: allocate and touch them
// before timing (a first touch can cost ~10 µs per 4 KiB page on a cloud VM, which would swamp a kernel).
#pragma once

#include <functional>
#include <vector>

namespace attnkit::bench {

struct TimingPlan {
  int repeats = 5;              // timed calls wanted after the warm-up
  double budget_seconds = 30;   // stop adding timed calls once they have used this much time
};

struct Timing {
  double median_seconds = 0;
  std::vector<double> samples;  // every timed call, in order (at least one)
};

// Calls `fn` once to warm up, then up to plan.repeats times, timing each call. A warm-up longer than
// kLongCallSeconds counts as a sample: one-time costs (cold caches, lazy set-up) are then below a
// percent of it, and slow baselines at large sizes would otherwise cost minutes for nothing.
// `before_each`, when given, runs untimed before every call, the warm-up included.
Timing time_calls(const TimingPlan& plan, const std::function<void()>& fn,
                  const std::function<void()>& before_each = {});

double seconds_of(const std::function<void()>& fn);  // one call, wall clock

}  // namespace attnkit::bench
