// The fast kernels for x86-64 with AVX-512F/BW/VL/DQ (compiled for those, AVX2, FMA and F16C inside
// the target region; only called when the CPU and the operating system support all of them).
#include "cpu/kernel_headers.hpp"  // first: shared code stays baseline (target_region.hpp)
#define ATTNKIT_ISA Avx512Isa
#define ATTNKIT_ISA_NAMESPACE avx512_target
#define ATTNKIT_TARGET_NAME avx512
ATTNKIT_BEGIN_TARGET(ATTNKIT_AVX512_FEATURES)
#include "cpu/simd/avx512.hpp"
#include "cpu/kernels_target.inl"
ATTNKIT_END_TARGET
#include "cpu/kernel_entry_points.inl"
