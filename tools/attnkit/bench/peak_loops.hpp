// Register-only arithmetic loops that measure the machine's compute ceiling: many independent
// accumulators, no loads or stores in the loop, so nothing but the FMA (or dot-product) units limits
// them. Each ISA's loop lives in its own translation unit compiled with that ISA's -m flags; callers
// must check the CPU (__builtin_cpu_supports) before calling one. Each returns the floating-point
// operations it performed (an FMA lane counts 2: a multiply and an add).
#pragma once

#include <cstdint>

namespace attnkit::bench {

double fma_loop_generic(std::int64_t iterations);  // any CPU: 128-bit vector multiply + add
#if defined(ATTNKIT_BENCH_X86)
double fma_loop_avx2(std::int64_t iterations);        // needs avx2 and fma
double fma_loop_avx512(std::int64_t iterations);      // needs avx512f
double bf16_dot_loop_avx512(std::int64_t iterations); // needs avx512f and avx512bf16 (vdpbf16ps)
// Needs amx-tile and amx-bf16, and the OS's permission to use the tile data (amx_tiles_permitted).
double amx_bf16_loop(std::int64_t iterations);
#endif

}  // namespace attnkit::bench
