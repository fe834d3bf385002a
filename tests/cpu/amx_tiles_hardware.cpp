// tdpbf16ps and tdpfp16ps themselves, through the tile targets' interface (src/cpu/simd/amx.hpp), for
// tests/cpu/test_amx_model.cpp (AVX-512, AVX512_BF16 and AMX flags; called only where the amx_bf16
// target runs, the CPU having the tiles and Linux granting their data, and tdpfp16ps only where
// amx_fp16 does).
#include "cpu/simd/amx.hpp"
#include "cpu/amx_tiles.hpp"

namespace attnkit::testing {

void hardware_tile_product(const float* c, const std::uint32_t* a, const std::uint32_t* b, float* out, int rows, int depth,
                           int columns, TilePairs pairs) {
  using Tiles = cpu::AmxTiles;
  Tiles::configure(tile_product_config(rows, depth, columns));
  Tiles::load<0>(c, 4 * columns);
  Tiles::load<1>(a, 4 * depth);
  Tiles::load<2>(b, 4 * columns);
  if (pairs == TilePairs::f16) {
    Tiles::dot_f16<0, 1, 2>();
  } else {
    Tiles::dot_bf16<0, 1, 2>();
  }
  Tiles::store<0>(out, 4 * columns);
  Tiles::release();
}

}  // namespace attnkit::testing
