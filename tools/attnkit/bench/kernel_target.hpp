// The SIMD target a case's kernel ran on, for its report row: the target the fast kernels use now
// (attnkit::active_target(): the best the CPU supports, or the one forced by ATTNKIT_TARGET or
// set_target), or none for the float64 reference, which has no SIMD target.
#pragma once

#include <optional>
#include <string>

#include "attnkit/attention.hpp"
#include "attnkit/targets.hpp"

namespace attnkit::bench {

inline std::optional<std::string> target_of(Kernel resolved) {
  if (resolved != Kernel::fast) return std::nullopt;
  return std::string(target_name(active_target()));
}

}  // namespace attnkit::bench
