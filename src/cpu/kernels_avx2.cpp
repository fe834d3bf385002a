// The fast kernels for x86-64 with AVX2, FMA and F16C (compiled for those inside the target region;
// only called when the CPU has all three).
#include "cpu/kernel_headers.hpp"  // first: shared code stays baseline (target_region.hpp)
#define ATTNKIT_ISA Avx2Isa
#define ATTNKIT_ISA_NAMESPACE avx2_target
#define ATTNKIT_TARGET_NAME avx2
ATTNKIT_BEGIN_TARGET(ATTNKIT_AVX2_FEATURES)
#include "cpu/simd/avx2.hpp"
#include "cpu/kernels_target.inl"
ATTNKIT_END_TARGET
#include "cpu/kernel_entry_points.inl"
