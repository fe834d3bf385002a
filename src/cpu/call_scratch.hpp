// Sizes, per-call buffers and row checks shared by the fast kernels' plans (forward.cpp,
// backward.cpp), compiled for the baseline CPU.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/integer.hpp"

namespace attnkit::cpu {

using detail::ceil_div;
using detail::round_up;

// Grow-only scratch of the calling thread (the vector is thread_local at the call site): once warm,
// a call touches no fresh pages.
template <class T>
T* scratch(std::vector<T>& buffer, std::int64_t count) {
  if (buffer.size() < static_cast<std::size_t>(count)) buffer.resize(static_cast<std::size_t>(count));
  return buffer.data();
}

// Whether x[0 .. count) holds no NaN or ±inf. (The kernels' own, in packing.inl, is per target.)
inline bool all_finite(const float* x, std::int64_t count) {
  return std::all_of(x, x + count, [](float v) { return std::isfinite(v); });
}

}  // namespace attnkit::cpu
