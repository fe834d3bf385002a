// tdpbf16ps itself, through the amx_bf16 target's tile interface (src/cpu/simd/amx.hpp), for
// tests/cpu/test_amx_model.cpp (AVX-512, AVX512_BF16 and AMX flags; called only where the amx_bf16
// target runs: the CPU has the tiles and Linux granted their data).
#include "cpu/simd/amx.hpp"
#include "cpu/amx_tiles.hpp"

namespace attnkit::testing {

void hardware_tile_product(const float* c, const std::uint32_t* a, const std::uint32_t* b, float* out, int rows, int depth,
                           int columns) {
  using Tiles = cpu::AmxTiles;
  Tiles::configure(tile_product_config(rows, depth, columns));
  Tiles::load<0>(c, 4 * columns);
  Tiles::load<1>(a, 4 * depth);
  Tiles::load<2>(b, 4 * columns);
  Tiles::dot_bf16<0, 1, 2>();
  Tiles::store<0>(out, 4 * columns);
  Tiles::release();
}

}  // namespace attnkit::testing
