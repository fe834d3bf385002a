// The avx512_bf16 target's kernels on 16-lane vectors of two AVX2 halves, with vdpbf16ps modelled: a
// test stand-in that runs on any AVX2 CPU (compiled with the AVX2 target's flags).
#include "cpu/simd/emulated16.hpp"
#define ATTNKIT_ISA Emulated16Bf16Isa
#define ATTNKIT_ISA_NAMESPACE avx512_bf16_emulated_target
#define ATTNKIT_TARGET_NAME avx512_bf16_emulated
#include "cpu/kernels_target.inl"
