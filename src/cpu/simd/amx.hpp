// The amx_bf16 and amx_fp16 targets: AMX tiles (AMX-TILE, AMX-BF16, and AMX-FP16 for the second) for
// bf16 (and f16) inputs' products, AVX-512 with AVX512_BF16 for everything between them. Included
// only by the translation units whose target region has those features, and only called on CPUs
// that have them and where Linux granted the tile data (target.cpp).
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
  // tdpfp16ps tmmC, tmmA, tmmB, spelled as its bytes (VEX.128.F2.0F38.W0 5C /r: ModRM.reg = C,
  // ModRM.rm = A, VEX.vvvv = B inverted), as assemblers before binutils 2.40 and LLVM 16 lack the
  // mnemonic.
  template <int C, int A, int B>
  static void dot_f16() {
    static_assert(C >= 0 && C < 8 && A >= 0 && A < 8 && B >= 0 && B < 8);
    __asm__ volatile(".byte 0xc4, 0xe2, %c0, 0x5c, %c1" ::"i"((~B & 15) << 3 | 3), "i"(0xC0 | C << 3 | A));
  }
};

struct AmxBf16Isa : Avx512Bf16Isa {
  static constexpr const char* kName = "amx_bf16";
  static constexpr Geometry kGeometry = kAmxGeometry;  // geometry.hpp
  static constexpr bool kTiles = true;
  using Tiles = AmxTiles;
};

// The amx_fp16 target: amx_bf16 plus AMX-FP16, whose tdpfp16ps takes f16 inputs' products too. P is
// rounded to f16 for P·V on that path (vcvtps2ph, ties to even, denormal halves kept, as
// tdpfp16ps reads them).
struct AmxFp16Isa : AmxBf16Isa {
  static constexpr const char* kName = "amx_fp16";
  static constexpr bool kTilesF16 = true;
  // Each float rounded to the nearest half (ties to even), as a float.
  static Vec round_to_f16(Vec v) { return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)); }
  // out[j] = (x[2j], x[2j + 1]) rounded to halves for j < 16, the floats being x[0 .. 16) = low and
  // x[16 .. 32) = high: consecutive halves are the pairs a tile product reads.
  static void round_into_f16_pairs(Vec low, Vec high, std::uint32_t* out) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_cvtps_ph(low, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 8), _mm512_cvtps_ph(high, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  // out[i] = even[i] | odd[i] << 16 for 16 lanes: the pairs of two half rows. Returns whether any of
  // the 32 values is ±inf or NaN (exponent all ones).
  static bool interleave_f16(const std::uint16_t* even, const std::uint16_t* odd, std::uint32_t* out) {
    return interleave_16bit(even, odd, out, 0x7C00);
  }
};

}  // namespace attnkit::cpu
