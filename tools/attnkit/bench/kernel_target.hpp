// The SIMD target a case's kernel ran on, for its report row. The fast kernels use
// attnkit::active_target() (the best the CPU supports, or the one forced by ATTNKIT_TARGET or
// set_target), but a tile target (amx_bf16) runs on its tiles only the calls whose q, k and v are
// bf16 (forward and backward) and hands every other call to its vector target; the row names the one
// that ran. The float64 reference has no SIMD target.
#pragma once

#include <optional>
#include <string>

#include "attnkit/attention.hpp"
#include "attnkit/dtype.hpp"
#include "attnkit/targets.hpp"

namespace attnkit::bench {

enum class Pass { forward, backward };

// One call: its pass and the dtypes of q, k and v (a quantized cache's k and v are int8 or int4 under
// f32 queries). The dtypes decide its target; the pass is named for the reader of a call site.
struct CallKind {
  Pass pass = Pass::forward;
  DType q = DType::f32, k = DType::f32, v = DType::f32;
};

// The forward or backward of q, k and v all in `dtype`.
inline CallKind call_of(Pass pass, DType dtype) { return {pass, dtype, dtype, dtype}; }

inline std::optional<std::string> target_of(Kernel resolved, const CallKind& call) {
  if (resolved != Kernel::fast) return std::nullopt;
  const Target active = active_target();
  const bool on_tiles = call.q == DType::bf16 && call.k == DType::bf16 && call.v == DType::bf16;
  // tile_vector_target is the target itself for every target without tiles.
  return std::string(target_name(on_tiles ? active : tile_vector_target(active)));
}

}  // namespace attnkit::bench
