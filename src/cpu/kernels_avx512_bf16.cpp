// The AVX-512 kernels with bf16 inputs' products by vdpbf16ps (compiled with the AVX-512 target's
// flags and -mavx512bf16; only called when the CPU has AVX512_BF16).
#include "cpu/simd/avx512_bf16.hpp"
#define ATTNKIT_ISA Avx512Bf16Isa
#define ATTNKIT_ISA_NAMESPACE avx512_bf16_target
#define ATTNKIT_TARGET_NAME avx512_bf16
#include "cpu/kernels_target.inl"
