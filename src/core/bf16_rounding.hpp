// float32 → bfloat16 rounding on bits, inline so that loops over rows vectorise it: to_bfloat16
// (dtype.cpp) and the rows the kernels store (element_io.cpp) round the same way.
#pragma once

#include <cstdint>

namespace attnkit::detail {

// The bf16 bits of the float with bits `bits`: round to nearest, ties to even; a NaN keeps its sign
// and becomes quiet. Branch-free, so that a loop over a row vectorises (called element by element,
// the bf16 output rows were 10% of a bf16 causal forward at n = 1024, d = 64; docs/tuning.md,
// "Storing output rows").
constexpr std::uint16_t bf16_bits_nearest_even(std::uint32_t bits) {
  // Add 0x7FFF plus the lowest kept bit, then truncate.
  const std::uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  const std::uint32_t quiet_nan = (bits >> 16) | 0x0040u;
  return static_cast<std::uint16_t>((bits & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : rounded);
}

}  // namespace attnkit::detail
