// The fast kernels for x86-64 with AVX2, FMA and F16C (compiled with -mavx2 -mfma -mf16c; only
// called when the CPU has all three).
#include "cpu/simd/avx2.hpp"
#define ATTNKIT_ISA Avx2Isa
#define ATTNKIT_ISA_NAMESPACE avx2_target
#define ATTNKIT_TARGET_NAME avx2
#include "cpu/kernels_target.inl"
