// Which supported target already runs a (target, dtype) pair's kernels, so that tests looping over
// targets per dtype can leave the pair out: a tile target's f32 calls (and its f16 calls, without f16
// tiles) run on its vector target, forward and backward alike (attnkit::call_target), and an f16 tile
// target's bf16 calls run the bf16 tile target's kernel source (AmxKernels.Fp16TileTargetsRunBf16Calls
// AsTheBf16TileTargets checks that they agree bit for bit).
#pragma once

#include <algorithm>
#include <optional>
#include <vector>

#include "attnkit/targets.hpp"

namespace attnkit::testing {

// The bf16 tile target an f16 tile target extends.
inline std::optional<Target> bf16_tile_twin(Target t) {
  if (t == Target::amx_fp16) return Target::amx_bf16;
  if (t == Target::amx_fp16_emulated) return Target::amx_bf16_emulated;
  return std::nullopt;
}

// The other supported target whose kernels run q, k and v of `dtype` on `t`, if any.
inline std::optional<Target> same_kernels_as(Target t, DType dtype) {
  const std::vector<Target> supported = supported_targets();
  const auto runs = [&](Target other) { return std::find(supported.begin(), supported.end(), other) != supported.end(); };
  const Target forward = call_target(t, dtype, dtype, dtype, Pass::forward);
  const Target backward = call_target(t, dtype, dtype, dtype, Pass::backward);
  if (forward != t && forward == backward && runs(forward)) return forward;
  if (dtype == DType::bf16) {
    if (const std::optional<Target> twin = bf16_tile_twin(t); twin && runs(*twin)) return twin;
  }
  return std::nullopt;
}

}  // namespace attnkit::testing
