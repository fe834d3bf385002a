// Compiling one target's kernels for its instruction set without letting that set reach code that
// other units share.
//
// A unit compiled whole with -mavx2 also compiles every inline function and template it uses from
// headers (std::vector, std::fill, the project's helpers) for AVX2, and the linker keeps one copy of
// each for the whole program: possibly the AVX2 one, which a CPU without AVX2 then dies on, even on
// the scalar path. So the per-target units are compiled without such flags: they include every shared
// header first (kernel_headers.hpp), compiled for the baseline CPU, and only what lies between
// ATTNKIT_BEGIN_TARGET and ATTNKIT_END_TARGET (the target's vector wrapper and its namespace of
// kernels) is compiled for the target's features. Baseline helpers still inline into the kernels.
// tests/cpu/check_isa_isolation.sh (the CTest isa_code_stays_in_its_target) checks the library's
// objects and linked programs: no function outside a target's code has an AVX instruction.
#pragma once

#define ATTNKIT_TARGET_PRAGMA_STRING(x) #x
#if defined(__clang__)
#define ATTNKIT_BEGIN_TARGET(features) \
  _Pragma(ATTNKIT_TARGET_PRAGMA_STRING(clang attribute push(__attribute__((target(features))), apply_to = function)))
#define ATTNKIT_END_TARGET _Pragma("clang attribute pop")
#else
#define ATTNKIT_BEGIN_TARGET(features) \
  _Pragma("GCC push_options") _Pragma(ATTNKIT_TARGET_PRAGMA_STRING(GCC target(features)))
#define ATTNKIT_END_TARGET _Pragma("GCC pop_options")
#endif

// Each target's features, as GCC's and clang's target attribute spell them.
#define ATTNKIT_AVX2_FEATURES "avx2,fma,f16c"
#define ATTNKIT_AVX512_FEATURES "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq"
#define ATTNKIT_AVX512_BF16_FEATURES "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16"
#define ATTNKIT_AMX_BF16_FEATURES "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,amx-tile,amx-bf16"
