// Warm-up, repeated calls, median.
#include "bench/timing.hpp"

#include <algorithm>
#include <chrono>

namespace attnkit::bench {

namespace {

constexpr double kLongCallSeconds = 2.0;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

}  // namespace

double seconds_of(const std::function<void()>& fn) {
  const auto start = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

Timing time_calls(const TimingPlan& plan, const std::function<void()>& fn, const std::function<void()>& before_each) {
  const auto timed_call = [&] {
    if (before_each) before_each();
    return seconds_of(fn);
  };
  Timing t;
  const double warm_up = timed_call();
  double spent = 0;
  if (warm_up > kLongCallSeconds) {
    t.samples.push_back(warm_up);
    spent = warm_up;
  }
  while (static_cast<int>(t.samples.size()) < std::max(plan.repeats, 1) &&
         (t.samples.empty() || spent < plan.budget_seconds)) {
    t.samples.push_back(timed_call());
    spent += t.samples.back();
  }
  t.median_seconds = median(t.samples);
  return t;
}

}  // namespace attnkit::bench
