// The amx_fp16 target's kernels with its tiles modelled (simd/amx_model.hpp) and its 16-lane vectors
// made of two AVX2 halves: a test stand-in that runs on any AVX2 CPU (compiled for the AVX2 target's
// features).
#include "cpu/kernel_headers.hpp"  // first: shared code stays baseline (target_region.hpp)
#define ATTNKIT_ISA EmulatedAmxFp16Isa
#define ATTNKIT_ISA_NAMESPACE amx_fp16_emulated_target
#define ATTNKIT_TARGET_NAME amx_fp16_emulated
ATTNKIT_BEGIN_TARGET(ATTNKIT_AVX2_FEATURES)
#include "cpu/simd/amx_emulated.hpp"
#include "cpu/kernels_target.inl"
ATTNKIT_END_TARGET
#include "cpu/kernel_entry_points.inl"
