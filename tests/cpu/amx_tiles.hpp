// One tile product, c + a·b by tdpbf16ps (or tdpfp16ps), with the tiles shaped rows × (depth pairs)
// and (depth pairs) × columns: by the portable model (test_amx_model.cpp, any CPU) and by the
// instruction (amx_tiles_hardware.cpp, compiled with the AMX flags: call only where the amx_bf16
// target runs, and for tdpfp16ps where amx_fp16 does).
// Matrices are row-major: c and out rows × columns floats, a rows × depth pairs, b depth × columns pairs.
#pragma once

#include <cstdint>

#include "cpu/simd/amx_model.hpp"

namespace attnkit::testing {

// The configuration of such a product: tile 0 the sums, 1 the A operand, 2 the B operand (defined
// in test_amx_model.cpp, compiled for the baseline CPU).
cpu::TileConfig tile_product_config(int rows, int depth, int columns);

// The pairs' format: bf16 (tdpbf16ps) or IEEE half (tdpfp16ps).
enum class TilePairs { bf16, f16 };

void model_tile_product(const float* c, const std::uint32_t* a, const std::uint32_t* b, float* out, int rows, int depth,
                        int columns, TilePairs pairs = TilePairs::bf16);
void hardware_tile_product(const float* c, const std::uint32_t* a, const std::uint32_t* b, float* out, int rows, int depth,
                           int columns, TilePairs pairs = TilePairs::bf16);

}  // namespace attnkit::testing
