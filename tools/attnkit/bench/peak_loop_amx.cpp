// The bf16 tile ceiling (AMX: tdpbf16ps), compiled with -mamx-tile -mamx-bf16 (see
// tools/attnkit/CMakeLists.txt). The amx_bf16 target runs bf16 forwards on the tiles, and a bf16
// case's "of AMX" is its rate over this one; torch's bf16 attention (through oneDNN) uses them too.
// One tdpbf16ps multiplies a 16 × 32 bf16 tile by a 32 × 16 one (pairs along the inner dimension)
// and adds into 16 × 16 f32 sums: 16·16·32 products, 2 floating-point operations each.
#include <immintrin.h>

#include <cstdint>

#include "bench/peak_loops.hpp"

namespace attnkit::bench {

namespace {

// The tile configuration's memory layout (Intel SDM, LDTILECFG): palette 1 has 8 tiles of at most
// 16 rows of 64 bytes.
struct TileConfig {
  std::uint8_t palette;
  std::uint8_t start_row;
  std::uint8_t reserved[14];
  std::uint16_t bytes_per_row[16];
  std::uint8_t rows[16];
};
static_assert(sizeof(TileConfig) == 64);

constexpr int kRows = 16;
constexpr int kRowBytes = 64;
constexpr int kInner = 32;  // bf16 values per A row: 64 bytes
constexpr int kProductsPerInstruction = kRows * kRows * kInner;
constexpr int kFlopsPerProduct = 2;
// Four independent sums (tiles 0–3) from two A tiles (4, 5) and two B tiles (6, 7): each A and B tile
// feeds two instructions, so the loop reuses its operands as a blocked kernel would.
constexpr int kInstructionsPerIteration = 4;
// bf16 1.0 and 2^-8: each instruction adds 32 · 2^-8 = 0.125 per element, exact in f32 far beyond
// any iteration count the calibration reaches (the sums are never read back).
constexpr std::uint16_t kOne = 0x3f80;
constexpr std::uint16_t kSmall = 0x3b80;

volatile float sink;

}  // namespace

double amx_bf16_loop(std::int64_t iterations) {
  TileConfig config{};
  config.palette = 1;
  for (int t = 0; t < 8; ++t) {
    config.rows[t] = kRows;
    config.bytes_per_row[t] = kRowBytes;
  }
  alignas(64) std::uint16_t a[kRows * kInner];
  alignas(64) std::uint16_t b[kRows * kInner];
  for (int i = 0; i < kRows * kInner; ++i) {
    a[i] = kOne;
    b[i] = kSmall;
  }
  _tile_loadconfig(&config);
  _tile_loadd(4, a, kRowBytes);
  _tile_loadd(5, a, kRowBytes);
  _tile_loadd(6, b, kRowBytes);
  _tile_loadd(7, b, kRowBytes);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (std::int64_t it = 0; it < iterations; ++it) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  alignas(64) float sums[kRows * kRows];
  _tile_stored(0, sums, kRows * static_cast<int>(sizeof(float)));
  _tile_release();
  sink = sums[0];
  return static_cast<double>(iterations) * kInstructionsPerIteration * kProductsPerInstruction * kFlopsPerProduct;
}

}  // namespace attnkit::bench
