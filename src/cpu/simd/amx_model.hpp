// A portable model of x86's AMX tiles (AMX-TILE, AMX-BF16, AMX-FP16): the eight tile registers of
// palette 1, ldtilecfg, tileloadd, tilestored, tilezero, tilerelease, tdpbf16ps and tdpfp16ps, in
// plain C++. The emulated tile targets (amx_bf16_emulated, amx_fp16_emulated) drive the tile kernels
// through it, so their tile shapes, tails and packing run on any x86-64 CPU; on CPUs with AMX the
// instructions are compared with it bit for bit (tests/cpu/test_amx_model.cpp).
//
// tdpbf16ps, as Intel's description of the instruction gives it: for each row m of the sums and each
// column n, an even and an odd sum start at zero and take, pair by pair k along the inner dimension,
//   even ← even + a[m].bf16[2k] · b[k].bf16[2n],   odd ← odd + a[m].bf16[2k+1] · b[k].bf16[2n+1],
// each a float32 fused multiply-add; then c[m][n] ← c[m][n] + (even + odd). Every step rounds to
// nearest even, reads denormal inputs as zero and flushes denormal results to zero, whatever MXCSR
// says (bf16_dot_model.hpp's helpers).
//
// tdpfp16ps is the same with pairs of IEEE half values, with one difference Intel's description
// gives: half inputs are converted exactly, denormal ones included (every half is a normal float),
// while the float32 sums still flush denormal results to zero.
//
// Compiled for the baseline CPU (kernel_headers.hpp includes it before any target region): the state
// is one thread's, as the hardware's is.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "attnkit/dtype.hpp"
#include "cpu/simd/bf16_dot_model.hpp"

namespace attnkit::cpu {

// The 64 bytes ldtilecfg reads (palette 1: eight tiles of at most 16 rows of at most 64 bytes).
struct TileConfig {
  std::uint8_t palette = 0;
  std::uint8_t start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t bytes_per_row[16] = {};
  std::uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

inline constexpr int kTileRegisters = 8;
inline constexpr int kTileMaxRows = 16;
inline constexpr int kTileRowBytes = 64;

// A configuration with every tile `rows` × `bytes` (the kernels use one shape for all eight).
inline TileConfig uniform_tile_config(int rows, int bytes) {
  TileConfig config;
  config.palette = 1;
  for (int t = 0; t < kTileRegisters; ++t) {
    config.rows[t] = static_cast<std::uint8_t>(rows);
    config.bytes_per_row[t] = static_cast<std::uint16_t>(bytes);
  }
  return config;
}

class AmxModel {
 public:
  static void load_config(const TileConfig& config) {
    State& s = state();
    if (config.palette != 1) fail("ldtilecfg: only palette 1 is modelled");
    for (int t = 0; t < kTileRegisters; ++t) {
      if (config.rows[t] > kTileMaxRows || config.bytes_per_row[t] > kTileRowBytes || config.bytes_per_row[t] % 4 != 0)
        fail("ldtilecfg: a tile is larger than 16 rows of 64 bytes, or its rows are not whole dwords");
    }
    s.config = config;
    s.configured = true;
    std::memset(s.tiles, 0, sizeof s.tiles);  // ldtilecfg zeroes the tile data
  }
  // tilerelease: back to the initial state (no configuration).
  static void release() {
    State& s = state();
    s.configured = false;
    std::memset(s.tiles, 0, sizeof s.tiles);
  }
  // tileloadd: the tile's rows from p, p + stride, ... (stride in bytes); the rest of the register zeroed.
  static void load(int tile, const void* p, std::int64_t stride) {
    Tile& t = configured_tile(tile);
    const int rows = state().config.rows[tile], bytes = state().config.bytes_per_row[tile];
    std::memset(t.bytes, 0, sizeof t.bytes);
    for (int r = 0; r < rows; ++r) std::memcpy(t.bytes[r], static_cast<const std::uint8_t*>(p) + r * stride, bytes);
  }
  // tilestored: the tile's rows to p, p + stride, ...
  static void store(int tile, void* p, std::int64_t stride) {
    const Tile& t = configured_tile(tile);
    const int rows = state().config.rows[tile], bytes = state().config.bytes_per_row[tile];
    for (int r = 0; r < rows; ++r) std::memcpy(static_cast<std::uint8_t*>(p) + r * stride, t.bytes[r], bytes);
  }
  static void zero(int tile) { std::memset(configured_tile(tile).bytes, 0, sizeof(Tile)); }
  // tdpbf16ps c, a, b (tile numbers): c[m][n] += Σ_k a[m] pair k · b[k] pair n, in the order above.
  static void dot_bf16(int c, int a, int b) { dot_pairs(c, a, b, "tdpbf16ps", bf16_bits_to_float); }
  // tdpfp16ps c, a, b: the same over pairs of half values.
  static void dot_f16(int c, int a, int b) { dot_pairs(c, a, b, "tdpfp16ps", half_bits_to_float); }

 private:
  static float half_bits_to_float(std::uint16_t bits) { return to_float(float16{bits}); }
  template <class Widen>
  static void dot_pairs(int c, int a, int b, const char* name, Widen widen) {
    const TileConfig& config = state().config;
    Tile& sums = configured_tile(c);
    const Tile& left = configured_tile(a);
    const Tile& right = configured_tile(b);
    const int rows = config.rows[c], columns = config.bytes_per_row[c] / 4, depth = config.bytes_per_row[a] / 4;
    if (config.rows[a] != rows || config.rows[b] != depth || config.bytes_per_row[b] != config.bytes_per_row[c] ||
        c == a || c == b || a == b)
      fail(name, ": the tiles' shapes do not fit (c rows = a rows, a row dwords = b rows, b row bytes = c row bytes), or two are the same register");
    for (int m = 0; m < rows; ++m) {
      for (int n = 0; n < columns; ++n) {
        float even = 0, odd = 0;
        for (int k = 0; k < depth; ++k) {
          const std::uint32_t x = left.dword(m, k), y = right.dword(k, n);
          even = flush_denormal(std::fma(widen(low(x)), widen(low(y)), even));
          odd = flush_denormal(std::fma(widen(high(x)), widen(high(y)), odd));
        }
        const float sum = flush_denormal(flush_denormal(sums.float_at(m, n)) + flush_denormal(even + odd));
        sums.set_float(m, n, sum);
      }
    }
  }

  struct Tile {
    alignas(64) std::uint8_t bytes[kTileMaxRows][kTileRowBytes];
    std::uint32_t dword(int row, int column) const {
      std::uint32_t x;
      std::memcpy(&x, bytes[row] + 4 * column, sizeof x);
      return x;
    }
    float float_at(int row, int column) const {
      float x;
      std::memcpy(&x, bytes[row] + 4 * column, sizeof x);
      return x;
    }
    void set_float(int row, int column, float x) { std::memcpy(bytes[row] + 4 * column, &x, sizeof x); }
  };
  struct State {
    TileConfig config;
    bool configured = false;
    Tile tiles[kTileRegisters];
  };
  static State& state() {
    thread_local State s;
    return s;
  }
  static Tile& configured_tile(int tile) {
    State& s = state();
    if (!s.configured) fail("a tile instruction without a tile configuration (ldtilecfg)");
    if (tile < 0 || tile >= kTileRegisters || s.config.rows[tile] == 0) fail("a tile instruction on an unconfigured tile");
    return s.tiles[tile];
  }
  static std::uint16_t low(std::uint32_t pair) { return static_cast<std::uint16_t>(pair & 0xFFFF); }
  static std::uint16_t high(std::uint32_t pair) { return static_cast<std::uint16_t>(pair >> 16); }
  // The hardware raises #UD on such a use; the model stops the program as loudly.
  [[noreturn]] static void fail(const char* what, const char* detail = "") {
    std::fprintf(stderr, "attnkit AMX model: %s%s\n", what, detail);
    std::abort();
  }
};

// The model behind the interface the tile kernels call (simd/amx.hpp has the instructions' one): tile
// numbers are template arguments, as the instructions take them as immediates.
struct AmxModelTiles {
  static void configure(const TileConfig& config) { AmxModel::load_config(config); }
  static void release() { AmxModel::release(); }
  template <int T>
  static void load(const void* p, std::int64_t stride) {
    AmxModel::load(T, p, stride);
  }
  template <int T>
  static void store(void* p, std::int64_t stride) {
    AmxModel::store(T, p, stride);
  }
  template <int T>
  static void zero() {
    AmxModel::zero(T);
  }
  template <int C, int A, int B>
  static void dot_bf16() {
    AmxModel::dot_bf16(C, A, B);
  }
  template <int C, int A, int B>
  static void dot_f16() {
    AmxModel::dot_f16(C, A, B);
  }
};

}  // namespace attnkit::cpu
