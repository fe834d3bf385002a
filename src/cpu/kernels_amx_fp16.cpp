// The kernels with bf16 and f16 inputs' products on AMX tiles (compiled for the amx_bf16 target's
// features; tdpfp16ps, which compilers of the supported versions cannot target, is written as its
// bytes in simd/amx.hpp). Only called on CPUs with AMX-FP16 as well, where Linux granted the tile data
// (target.cpp).
#include "cpu/kernel_headers.hpp"  // first: shared code stays baseline (target_region.hpp)
#define ATTNKIT_ISA AmxFp16Isa
#define ATTNKIT_ISA_NAMESPACE amx_fp16_target
#define ATTNKIT_TARGET_NAME amx_fp16
ATTNKIT_BEGIN_TARGET(ATTNKIT_AMX_BF16_FEATURES)
#include "cpu/simd/amx.hpp"
#include "cpu/kernels_target.inl"
ATTNKIT_END_TARGET
#include "cpu/kernel_entry_points.inl"
