// The amx_bf16 target: AMX tiles (AMX-TILE, AMX-BF16) for bf16 inputs' products, AVX-512 with
// AVX512_BF16 for everything between them. Included only by the translation unit whose target region
// has those features, and only called on CPUs that have them and where Linux granted the tile data
// (target.cpp).
//
// The tile instructions take their tile registers as immediates, so the interface takes tile numbers
// as template arguments (amx_model.hpp's AmxModelTiles is the same interface over the model). The
// inline assembly names each register by its number ("%c" prints the constant bare); loads and
// stores declare that they touch memory, so that the compiler neither sinks a vector store below
// the tile load that reads it nor hoists a read above the tile store that writes it.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "cpu/geometry.hpp"
#include "cpu/simd/amx_model.hpp"
#include "cpu/simd/avx512_bf16.hpp"

namespace attnkit::cpu {

struct AmxTiles {
  static void configure(const TileConfig& config) { __asm__ volatile("ldtilecfg %0" ::"m"(config)); }
  static void release() { __asm__ volatile("tilerelease" ::: "memory"); }
  template <int T>
  static void load(const void* p, std::int64_t stride) {
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm%c2" ::"r"(p), "r"(stride), "i"(T) : "memory");
  }
  template <int T>
  static void store(void* p, std::int64_t stride) {
    __asm__ volatile("tilestored %%tmm%c2, (%0,%1,1)" ::"r"(p), "r"(stride), "i"(T) : "memory");
  }
  template <int T>
  static void zero() {
    __asm__ volatile("tilezero %%tmm%c0" ::"i"(T));
  }
  // tdpbf16ps tmmC, tmmA, tmmB (AT&T order: B, A, C).
  template <int C, int A, int B>
  static void dot_bf16() {
    __asm__ volatile("tdpbf16ps %%tmm%c2, %%tmm%c1, %%tmm%c0" ::"i"(C), "i"(A), "i"(B));
  }
};

struct AmxBf16Isa : Avx512Bf16Isa {
  static constexpr const char* kName = "amx_bf16";
  static constexpr Geometry kGeometry = kAmxGeometry;  // geometry.hpp
  static constexpr bool kTiles = true;
  using Tiles = AmxTiles;
};

}  // namespace attnkit::cpu
