// The fast kernels for x86-64 with AVX-512F/BW/VL/DQ (compiled with those and -mavx2 -mfma -mf16c;
// only called when the CPU and the operating system support all of them).
#include "cpu/simd/avx512.hpp"
#define ATTNKIT_ISA Avx512Isa
#define ATTNKIT_ISA_NAMESPACE avx512_target
#define ATTNKIT_TARGET_NAME avx512
#include "cpu/kernels_target.inl"
