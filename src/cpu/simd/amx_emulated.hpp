// The amx_bf16 and amx_fp16 targets' kernels on any AVX2 CPU: the 16-lane emulated vectors with
// vdpbf16ps modelled (emulated16.hpp) between the tile products, and the tiles by their portable model
// (amx_model.hpp). Compiled with the AVX2 target's flags.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "cpu/geometry.hpp"
#include "cpu/simd/amx_model.hpp"
#include "cpu/simd/emulated16.hpp"

namespace attnkit::cpu {

struct EmulatedAmxBf16Isa : Emulated16Bf16Isa {
  static constexpr const char* kName = "amx_bf16_emulated";
  static constexpr Geometry kGeometry = kAmxGeometry;  // the real amx_bf16 target's tiles
  static constexpr bool kTiles = true;
  using Tiles = AmxModelTiles;
};

// amx_fp16's f16 operations (amx.hpp's AmxFp16Isa) by F16C's vcvtps2ph on each half: the same
// instruction on narrower registers, so the same bits.
struct EmulatedAmxFp16Isa : EmulatedAmxBf16Isa {
  static constexpr const char* kName = "amx_fp16_emulated";
  static constexpr bool kTilesF16 = true;
  static Vec round_to_f16(Vec v) { return {round_half_to_f16(v.lo), round_half_to_f16(v.hi)}; }
  static void round_into_f16_pairs(Vec low, Vec high, std::uint32_t* out) {
    const Avx2Isa::Vec quarters[4] = {low.lo, low.hi, high.lo, high.hi};
    for (int q = 0; q < 4; ++q)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 4 * q), _mm256_cvtps_ph(quarters[q], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  static bool interleave_f16(const std::uint16_t* even, const std::uint16_t* odd, std::uint32_t* out) {
    return interleave_16bit(even, odd, out, 0x7C00);
  }

 private:
  static __m256 round_half_to_f16(__m256 x) { return _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)); }
};

}  // namespace attnkit::cpu
