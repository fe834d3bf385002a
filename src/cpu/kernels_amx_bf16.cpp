// The kernels with bf16 inputs' products on AMX tiles (compiled for the AVX-512 target's features,
// AVX512_BF16, AMX-TILE and AMX-BF16 inside the target region; only called on CPUs that have them and
// where Linux granted the tile data, target.cpp).
#include "cpu/kernel_headers.hpp"  // first: shared code stays baseline (target_region.hpp)
#define ATTNKIT_ISA AmxBf16Isa
#define ATTNKIT_ISA_NAMESPACE amx_bf16_target
#define ATTNKIT_TARGET_NAME amx_bf16
ATTNKIT_BEGIN_TARGET(ATTNKIT_AMX_BF16_FEATURES)
#include "cpu/simd/amx.hpp"
#include "cpu/kernels_target.inl"
ATTNKIT_END_TARGET
#include "cpu/kernel_entry_points.inl"
