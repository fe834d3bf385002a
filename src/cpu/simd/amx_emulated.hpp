// The amx_bf16 target's kernels on any AVX2 CPU: the 16-lane emulated vectors with vdpbf16ps modelled
// (emulated16.hpp) between the tile products, and the tiles by their portable model (amx_model.hpp).
// Compiled with the AVX2 target's flags.
#pragma once

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

}  // namespace attnkit::cpu
