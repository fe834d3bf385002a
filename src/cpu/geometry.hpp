// Tile geometry per target: the register tile of the micro-kernels (rows × vectors of accumulators),
// the vector width, and the key block the forward streams. A plan pads rows and columns to the running
// target's tiles (its kernels carry their geometry, kernels.hpp); the workspaces are sized for the
// largest. The static_asserts below tie the numbers together, so a target whose tiles would step past
// a padded row, column or block does not compile. Target-independent (no intrinsics).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <iterator>
#include <numeric>

namespace attnkit::cpu {

struct Geometry {
  int lanes;         // floats per vector
  int tile_rows;     // query rows per register tile
  int tile_vectors;  // vectors per tile row
  int key_block;     // keys streamed per forward step
  int registers;     // vector registers the target's code may keep live
  int rows_per_item; // query rows (over a GQA group) per forward work item
  int long_rows_per_item;  // the same for long problems (item_rows)
  int backward_key_block;  // keys per backward step (K, V, dK, dV blocks stay in L2)
  int decode_key_block;    // keys per step of a single-tile item (decoding) where short_decode_blocks()
  constexpr int tile_cols() const { return lanes * tile_vectors; }
  // The backward pads a key block to whole tiles both ways (tile_at_b steps over keys by rows).
  constexpr int backward_key_pad() const { return std::lcm(tile_rows, tile_cols()); }
};

// AVX2: 16 vector registers; 6 × 2 accumulators, two loaded vectors and a broadcast. Work items of
// 384 rows, as AVX-512's (below): larger items pack each key block less often; on an AVX2-only
// Zen 3, 384 measured 0.99–1.12× 192 except where a call has too few items for two threads. Key
// blocks of 64 measured slower, of 256 slower at d = 128. See docs/tuning.md, "Block geometry".
inline constexpr Geometry kAvx2Geometry{.lanes = 8,
                                        .tile_rows = 6,
                                        .tile_vectors = 2,
                                        .key_block = 128,
                                        .registers = 16,
                                        .rows_per_item = 384,
                                        .long_rows_per_item = 384,
                                        .backward_key_block = 96,
                                        .decode_key_block = 128};
// The scalar target runs the AVX2 geometry's tiles and key blocks over one-float vectors (and
// items of 192 rows, not tuned).
inline constexpr Geometry kScalarGeometry{.lanes = 1,
                                          .tile_rows = 6,
                                          .tile_vectors = 2,
                                          .key_block = 128,
                                          .registers = 16,
                                          .rows_per_item = 192,
                                          .long_rows_per_item = 192,
                                          .backward_key_block = 96,
                                          .decode_key_block = 128};
// AVX-512: 32 vector registers; 8 × 2 accumulators of 16 floats (a 12 × 2 tile ran slower on an
// Intel Xeon), keys in blocks of 512 (256 and 128 were no faster). Each key block is packed once per
// work item, so larger items pack less often: 384 rows, and 768 for long problems (from
// kLongItemsFrom query rows per KV head; at n = 1024, 768 balanced worse over two threads). The
// backward steps over 192 keys, so that its K, V, dK and dV blocks (384 KiB at d = 128 in f32) stay
// in a 1 MiB L2 while the query rows, dO and dQ stream through half as often as with 96; AVX2 keeps
// 96 (a Zen 3's L2 is half as large). Decoding on Intel CPUs steps over 128 keys rather than 512
// (short_decode_blocks, kernels.hpp), with its value rows requested into L1, where they wait a block
// (64 KiB at d = 128, f32) rather than 256 KiB; AMD CPUs keep blocks of 512 with f32 values into L2.
// The AVX2 and scalar targets' blocks are 128 either way. Every one of these was measured: see
// docs/tuning.md, "Block geometry", "Backward" and "Decode blocks".
// The emulated 16-lane targets use the same geometry.
inline constexpr Geometry kAvx512Geometry{.lanes = 16,
                                          .tile_rows = 8,
                                          .tile_vectors = 2,
                                          .key_block = 512,
                                          .registers = 32,
                                          .rows_per_item = 384,
                                          .long_rows_per_item = 768,
                                          .backward_key_block = 192,
                                          .decode_key_block = 128};

// AMX (amx_bf16): an AMX tile of sums is 16 rows × 16 floats, so a register tile is 16 query rows; its
// columns are two vectors, 32 keys, the keys one tile row of bf16 values multiplies (a tile row is 64
// bytes, 32 bf16 values). The vector code between the tile products (softmax, masks, the backward's
// dS) runs on these tiles; the blocks and items are AVX-512's, none of them measured on AMX yet.
inline constexpr Geometry kAmxGeometry{.lanes = 16,
                                       .tile_rows = 16,
                                       .tile_vectors = 2,
                                       .key_block = 512,
                                       .registers = 32,
                                       .rows_per_item = 384,
                                       .long_rows_per_item = 768,
                                       .backward_key_block = 192,
                                       .decode_key_block = 128};
// bf16 values in one row of an AMX tile (64 bytes): the tile kernels pad d_k and keys to it.
inline constexpr std::int64_t kTileDepth = 32;

inline constexpr Geometry kAllGeometries[] = {kScalarGeometry, kAvx2Geometry, kAvx512Geometry, kAmxGeometry};

// The largest value of a field (or of a member function such as tile_cols) over every target.
template <class Field>
constexpr std::int64_t max_over_geometries(Field field) {
  std::int64_t largest = 0;
  for (const Geometry& g : kAllGeometries) largest = std::max<std::int64_t>(largest, std::invoke(field, g));
  return largest;
}

// The sizes plans and workspaces are laid out for, whichever target runs, the largest of any target:
// the most rows any plan pads to (scores of one tile), the most columns any plan pads d_k or d_v to,
// and the forward's key and value blocks.
inline constexpr std::int64_t kMaxTileRows = max_over_geometries(&Geometry::tile_rows);
inline constexpr std::int64_t kMaxTileCols = max_over_geometries(&Geometry::tile_cols);
inline constexpr std::int64_t kMaxKeyBlock = max_over_geometries(&Geometry::key_block);
inline constexpr std::int64_t kDecodeQueries = 16;  // n at or below this is decoding: keys are split
inline constexpr std::int64_t kSplitKeys = 1024;    // keys per split when decoding (fixed: results
                                                    // must not depend on the thread count)
// The backward's blocks. The largest target's keys per step (workspaces):
inline constexpr std::int64_t kMaxBackwardKeyBlock = max_over_geometries(&Geometry::backward_key_block);
inline constexpr std::int64_t kBackwardQueryBlock = 48;  // query rows whose dK, dV contributions are summed at once
inline constexpr std::int64_t kBackwardMinItems = 8;     // chunks per (batch, KV head) until there are this many items
// Pairs of a backward query block's rows, padded to whole tile rows of pairs (kTileDepth / 2): the
// depth of the tile path's dV and dK sums.
inline constexpr std::int64_t kBlockRowPairs = (kBackwardQueryBlock / 2 + kTileDepth / 2 - 1) / (kTileDepth / 2) * (kTileDepth / 2);

// Query rows per KV head (group · n) from which a call takes the long items.
inline constexpr std::int64_t kLongItemsFrom = 2048;

// Rows (over a GQA group) per forward work item of a call with n queries per head and `group` query
// heads per KV head (compared without multiplying: the sizes of zero-stride views may be huge).
constexpr std::int64_t item_rows(const Geometry& g, std::int64_t group, std::int64_t n) {
  return n >= (kLongItemsFrom + group - 1) / group ? g.long_rows_per_item : g.rows_per_item;
}

// Keys per step of the forward's stream: decode_key_block for an item of one register tile (decoding)
// where the plan takes short decode blocks (kernels.hpp's short_decode_blocks), else key_block.
constexpr std::int64_t forward_key_block(const Geometry& g, bool one_tile, bool short_decode_blocks) {
  return one_tile && short_decode_blocks ? g.decode_key_block : g.key_block;
}

constexpr bool fits_every_plan(const Geometry& g) {
  return g.tile_rows <= kMaxTileRows && g.tile_cols() <= kMaxTileCols && g.key_block <= kMaxKeyBlock &&
         g.key_block % g.tile_cols() == 0 && kSplitKeys % g.key_block == 0 && g.rows_per_item % g.tile_rows == 0 &&
         g.decode_key_block % g.tile_cols() == 0 && g.decode_key_block <= g.key_block &&
         kSplitKeys % g.decode_key_block == 0 &&
         g.long_rows_per_item % g.tile_rows == 0 && g.long_rows_per_item >= g.rows_per_item &&
         kBackwardQueryBlock % g.tile_rows == 0 && g.backward_key_block % g.backward_key_pad() == 0 &&
         g.backward_key_block <= kMaxBackwardKeyBlock;
}
static_assert(std::all_of(std::begin(kAllGeometries), std::end(kAllGeometries), fits_every_plan),
              "every target's tiles fit the plans' paddings and blocks");
// The values the maxima come to: a target with larger tiles or blocks grows every thread's
// workspace (workspace.hpp), so that should be a decision, made here.
static_assert(kMaxTileRows == 16 && kMaxTileCols == 32 && kMaxKeyBlock == 512 && kMaxBackwardKeyBlock == 192);

}  // namespace attnkit::cpu
