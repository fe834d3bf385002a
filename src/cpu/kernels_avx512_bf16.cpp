// The AVX-512 kernels with bf16 inputs' products by vdpbf16ps (compiled for the AVX-512 target's
// features and AVX512_BF16 inside the target region; only called when the CPU has AVX512_BF16).
#include "cpu/kernel_headers.hpp"  // first: shared code stays baseline (target_region.hpp)
#define ATTNKIT_ISA Avx512Bf16Isa
#define ATTNKIT_ISA_NAMESPACE avx512_bf16_target
#define ATTNKIT_TARGET_NAME avx512_bf16
ATTNKIT_BEGIN_TARGET(ATTNKIT_AVX512_BF16_FEATURES)
#include "cpu/simd/avx512_bf16.hpp"
#include "cpu/kernels_target.inl"
ATTNKIT_END_TARGET
#include "cpu/kernel_entry_points.inl"
