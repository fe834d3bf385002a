// The AVX-512 target's kernels and tile geometry on 16-lane vectors made of two AVX2 halves: a test
// stand-in that runs on any AVX2 CPU (compiled for the AVX2 target's features).
#include "cpu/kernel_headers.hpp"  // first: shared code stays baseline (target_region.hpp)
#define ATTNKIT_ISA Emulated16Isa
#define ATTNKIT_ISA_NAMESPACE avx512_emulated_target
#define ATTNKIT_TARGET_NAME avx512_emulated
ATTNKIT_BEGIN_TARGET(ATTNKIT_AVX2_FEATURES)
#include "cpu/simd/emulated16.hpp"
#include "cpu/kernels_target.inl"
ATTNKIT_END_TARGET
#include "cpu/kernel_entry_points.inl"
