// Minimal fork-join over independent tasks, for the reference kernels. Each task index runs exactly
// once on some thread; tasks must write disjoint memory, so results never depend on the thread count.
// (The fast kernels' persistent pool replaces this where speed matters.)
#pragma once

#include <cstdint>
#include <functional>

namespace attnkit::detail {

// Runs body(t) for t in [0, count) on up to attnkit::num_threads() threads. The first exception a
// task throws is rethrown on the calling thread after all threads have joined.
void parallel_for(std::int64_t count, const std::function<void(std::int64_t)>& body);

}  // namespace attnkit::detail
