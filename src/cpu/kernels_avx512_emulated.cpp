// The AVX-512 target's kernels and tile geometry on 16-lane vectors made of two AVX2 halves: a test
// stand-in that runs on any AVX2 CPU (compiled with the AVX2 target's flags).
#include "cpu/simd/emulated16.hpp"
#define ATTNKIT_ISA Emulated16Isa
#define ATTNKIT_ISA_NAMESPACE avx512_emulated_target
#define ATTNKIT_TARGET_NAME avx512_emulated
#include "cpu/kernels_target.inl"
