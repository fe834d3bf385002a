// The SIMD target a case's kernel ran on, for its report row: the one the library runs a call of
// these dtypes on (attnkit::call_target) while attnkit::active_target() is in use (the best the CPU
// supports, or the one forced by ATTNKIT_TARGET or set_target). With a tile target (amx_bf16,
// amx_fp16) in use, only the calls it runs on its tiles run on it; the others run on its vector
// target, and the row names that one. The float64 reference has no SIMD target.
#pragma once

#include <optional>
#include <string>

#include "attnkit/attention.hpp"
#include "attnkit/dtype.hpp"
#include "attnkit/targets.hpp"

namespace attnkit::bench {

// q, k and v in their dtypes (a quantized cache's k and v are quantized rows under f32 queries).
inline std::optional<std::string> target_of(Kernel resolved, DType q, DType k, DType v, Pass pass) {
  if (resolved != Kernel::fast) return std::nullopt;
  return std::string(target_name(call_target(active_target(), q, k, v, pass)));
}

}  // namespace attnkit::bench
