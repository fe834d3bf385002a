// The fast forward kernel, FlashAttention-2 style, written once over an ISA wrapper.
//
// Included once per target by src/cpu/kernels_<target>.cpp, which defines ATTNKIT_ISA (the wrapper
// type) and ATTNKIT_ISA_NAMESPACE; everything here lives in that namespace, so no inline function is
// shared between translation units compiled with different instruction sets. It brings in the
// pieces the backward kernel (flash_backward.inl, included after it) shares: packing.inl,
// micro_kernels.inl, tile_bias.inl. No include guard on purpose.
//
// For one work item (a block of queries of every head in a GQA group, see forward_plan.hpp), with
// the path the item takes (forward_paths.inl) supplying the steps:
//
//   for each key block K_j, V_j that some row can see:
//     pack K_j and V_j once for every tile (packed paths)       path.pack
//     for each register tile of kTileRows rows (the tile path's products take two at once):
//       scores = q_tile · K_jᵀ · scale                          path.scores
//       scores = bias(scores), −inf where masked                apply_bias_and_mask
//       m_new = max(m, row_max(scores)),  p = exp(scores − m_new),
//       l = l·exp(m − m_new) + row_sum(p),  p = dropout(p)      path.probabilities
//       acc = acc·exp(m − m_new) + p · V_j                      path.accumulate
//   O = acc / l,  LSE = m + log l                                finalize (forward.cpp)
//
// Scores stay in natural units and exp is taken of the difference s − m, which is exact for nearby
// values, and the scale multiplies the finished dot products. (Scaling the scores to log2 units up
// front to use exp2, or pre-scaling Q by the scale, each saves a multiply per score but adds a
// rounding: on inputs with outliers each measured up to 3.8× the naive float32 error, failing the
// accuracy rule; see docs/tuning.md, "The online softmax and its exp".)

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <type_traits>
#include <utility>

#include "attnkit/quantized.hpp"
#include "core/bf16_rounding.hpp"
#include "core/element_io.hpp"
#include "core/philox.hpp"
#include "core/softmax_partial.hpp"
#include "cpu/forward_plan.hpp"
#include "cpu/kernels.hpp"
#include "cpu/row_prefetch.hpp"
#include "cpu/simd/math.hpp"
#include "cpu/visibility.hpp"
#include "cpu/workspace.hpp"

namespace attnkit::cpu::ATTNKIT_ISA_NAMESPACE {

using Isa = ATTNKIT_ISA;
using Vec = Isa::Vec;

#include "cpu/packing.inl"
#include "cpu/micro_kernels.inl"
#include "cpu/tile_bias.inl"
#include "cpu/stored_rows.inl"
#include "cpu/forward_packing.inl"
#include "cpu/online_softmax.inl"
#include "cpu/decode_from_rows.inl"
#include "cpu/tile_products.inl"
#include "cpu/forward_paths.inl"

static_assert(kKeyBlock % kTileCols == 0, "key blocks hold whole register tiles");

// ---- the key loop ----

// The item's stream: its keys in the split and the span of them some row sees.
ItemStream item_stream(const ForwardPlan& plan, ForwardWorkspace& ws, const ItemCoordinates& item, KeyRange keys) {
  std::int64_t first = keys.end, last = keys.begin - 1;
  for (std::int64_t r = 0; r < ws.rows; ++r) {
    const RowInfo& info = ws.row_info[r];
    if (first_seen(info, keys) > last_seen(info, keys)) continue;
    first = std::min(first, first_seen(info, keys));
    last = std::max(last, last_seen(info, keys));
  }
  return {plan, ws, item, keys, first, last};
}

// While a block's tiles compute, the next block's key and value rows are requested, a share per
// tile spread over its products' column chunks (SpreadRowPrefetch), so that packing the next block
// finds them in cache rather than waiting on memory. A single tile requests its rows itself.
class NextBlockRequests {
 public:
  NextBlockRequests(const ItemStream& s, const KeyBlock& block, std::int64_t size, bool single_tile)
      : s_(s),
        next_(block.j0 + size),
        width_(std::min(size, std::min(s.keys.end, s.last_seen + 1) - next_)),
        rows_per_tile_(width_ > 0 ? (width_ + s.ws.rows / kTileRows - 1) / (s.ws.rows / kTileRows) : 0),
        single_tile_(single_tile),
        keys_(s.problem().k, s.item.kv_head),
        values_(s.problem().v, s.item.kv_head) {}
  // The share of the tile at `row`, spread over its chunks of `cols` score and d_v value columns.
  SpreadRowPrefetch share(std::int64_t row, std::int64_t cols) const {
    const std::int64_t first = row / kTileRows * rows_per_tile_;
    return SpreadRowPrefetch(s_.problem(), s_.item.batch, keys_, values_, next_, first,
                             single_tile_ ? first : std::min(width_, first + rows_per_tile_),
                             (cols + s_.ws.d_v) / kTileCols);
  }

 private:
  const ItemStream& s_;
  std::int64_t next_, width_, rows_per_tile_;
  bool single_tile_;
  RowPrefetcher keys_, values_;
};

// Whether every row of the tile has its scores as its logits (no bias, mask or softcap to apply).
bool tile_scores_are_logits(const ItemStream& s, const KeyBlock& block, const Tile& tile) {
  for (std::int64_t r = 0; r < kTileRows; ++r)
    if (!scores_are_logits(s.problem(), s.ws.row_info[tile.row + r], s.keys, block.j0, tile.width, tile.cols)) return false;
  return true;
}

// A path whose products can take two tiles at once (PackedTiles).
template <class Path>
constexpr bool kTakesTilePairs = requires(Path& path, NothingBetweenChunks& between) {
  path.pair_scores(std::int64_t{}, std::int64_t{}, between);
};

// The scores and pairs of the second tile of a pair lie one tile on in the workspace. The masks, the
// softmax and dropout work on the tile at the start of ws.scores and ws.p_pairs, so they run on the
// second tile with the two pointers moved to it for the time being.
class SecondTileOfPair {
 public:
  explicit SecondTileOfPair(ForwardWorkspace& ws) : ws_(ws) {
    ws_.scores += kTileRows * kKeyBlock;
    ws_.p_pairs += kTileRows * (kKeyBlock / 2);
  }
  ~SecondTileOfPair() {
    ws_.scores -= kTileRows * kKeyBlock;
    ws_.p_pairs -= kTileRows * (kKeyBlock / 2);
  }
  SecondTileOfPair(const SecondTileOfPair&) = delete;
  SecondTileOfPair& operator=(const SecondTileOfPair&) = delete;

 private:
  ForwardWorkspace& ws_;
};

// The tile's rounded probabilities of keys [from, to) set to zero: the keys of the pair's other tile
// past this one's columns, which the pair's P·V reads.
void clear_pairs_past(ForwardWorkspace& ws, std::int64_t from, std::int64_t to) {
  for (std::int64_t r = 0; r < kTileRows; ++r) {
    std::uint32_t* pairs = ws.p_pairs + r * (kKeyBlock / 2);
    std::fill(pairs + from / 2, pairs + to / 2, std::uint32_t{0});
  }
}

// The tiles at `row` and `row` + kTileRows through the block with their products taken together;
// false, with nothing done, when either sees no key of the block, and the tiles go one at a time.
// The scale, masks and softmax run on each tile as on a single one (pair_probabilities); the products
// span the wider of the two, whose extra scores the other tile never reads and whose extra
// probabilities it sets to zero.
template <class Path>
bool stream_tile_pair(Path& path, const ItemStream& s, const KeyBlock& block, const NextBlockRequests& next,
                      std::int64_t row, float* alpha) {
  Tile tiles[2];
  for (std::int64_t half = 0; half < 2; ++half) {
    const std::int64_t at = row + half * kTileRows;
    const std::int64_t width = seen_width(s.ws.row_info + at, kTileRows, s.keys, block.j0, block.width);
    if (width == 0) return false;
    tiles[half] = {at, width, round_up(width, Path::kColumnPad)};
  }
  const std::int64_t cols = std::max(tiles[0].cols, tiles[1].cols);
  SpreadRowPrefetch first = next.share(row, cols), second = next.share(row + kTileRows, cols);
  auto between = [&] {
    first();
    second();
  };
  path.pair_scores(row, cols, between);
  for (std::int64_t half = 0; half < 2; ++half) {
    std::optional<SecondTileOfPair> moved;
    if (half == 1) moved.emplace(s.ws);
    const Tile& tile = tiles[half];
    path.pair_probabilities(block, tile, alpha + half * kTileRows, tile_scores_are_logits(s, block, tile));
    clear_pairs_past(s.ws, tile.cols, cols);
  }
  path.pair_accumulate(row, cols, alpha, between);
  return true;
}

// One key block through every register tile of the item, two at a time where the path takes pairs.
// alpha has room for two tiles' rescale factors.
template <class Path>
void stream_tiles(Path& path, const ItemStream& s, const KeyBlock& block, const NextBlockRequests& next, float* alpha) {
  for (std::int64_t row = 0; row < s.ws.rows; row += kTileRows) {
    if constexpr (kTakesTilePairs<Path>) {
      if (row + 2 * kTileRows <= s.ws.rows && stream_tile_pair(path, s, block, next, row, alpha)) {
        row += kTileRows;
        continue;
      }
    }
    const std::int64_t width = seen_width(s.ws.row_info + row, kTileRows, s.keys, block.j0, block.width);
    const Tile tile{row, width, round_up(width, Path::kColumnPad)};
    SpreadRowPrefetch between = next.share(row, tile.cols);
    if (tile.width == 0) continue;  // a fully masked tile
    path.scores(block, tile, between);
    if (!tile_scores_are_logits(s, block, tile)) apply_bias_and_mask(s, block, tile);
    path.probabilities(block, tile, alpha);
    path.accumulate(block, tile, alpha, between);
  }
}

// Streams the item's key blocks within the split through `path`, leaving (row_max, row_sum, acc) in
// the workspace. Blocks start at multiples of their size from the split's start, the same blocks
// for any item; keys past the last one a row sees are neither packed nor computed (on the causal
// diagonal an item's last block is seen only up to its last row).
template <class Path>
void stream_key_blocks(Path& path, const ItemStream& s) {
  const std::int64_t size = forward_key_block(Isa::kGeometry, !Path::kPacked, s.plan.short_decode_blocks);
  float alpha[2 * kTileRows];
  for (std::int64_t j0 = s.keys.begin + (s.first_seen - s.keys.begin) / size * size; j0 <= s.last_seen; j0 += size) {
    const std::int64_t width = std::min(size, s.last_seen + 1 - j0);
    const KeyBlock block{j0, width, round_up(width, kTileCols)};
    if constexpr (Path::kPacked) {
      if (!path.pack(block)) {  // a value is NaN or ±inf
        SeenValuesOnly<Path> seen_only{path};
        stream_tiles(seen_only, s, block, NextBlockRequests(s, block, size, false), alpha);
        continue;
      }
    }
    stream_tiles(path, s, block, NextBlockRequests(s, block, size, !Path::kPacked), alpha);
  }
}

// The item through its path (forward_paths.inl): several tiles are packed once per block, as bf16
// pairs on the bf16-dot path; a single tile (decoding) reads the rows as stored, as pairs where the
// keys are of unit stride, d_k is whole vectors of pairs and the values are read in place. On a tile
// target, bf16 inputs take the tiles but for such a decode tile of at most
// kTileTargetVectorDecodeRows live rows, which takes the rows as pairs on vectors (vdpbf16ps, P
// rounded to bf16 as on the tiles); f16 ones on a target with f16 tile products take the tiles
// whatever the item's size. Calls of other dtypes run on the vector target's kernels (target.cpp's
// kernel_target), so the packed float32 path here only serves a caller that asks for this target's
// kernels by name. The path depends on the item alone, so a packed sequence is computed as it would
// be in a call of its own.
template <class Format>
void stream_tile_item(const ItemStream& s) {
  prepare_query_pairs<Format>(s.ws, tile_query_stride(s.ws.d_k));
  configure_tiles();
  PackedTiles<Isa, Format> path{s};
  stream_key_blocks(path, s);
  release_tiles();
}

void stream_item(const ItemStream& s) {
  const detail::Problem& p = s.problem();
  const bool bf16_dot = uses_bf16_dot(p);
  const bool decode_pairs = bf16_dot && s.ws.rows == kTileRows && value_rows_in_place(p, s.ws) && p.k.stride(3) == 1 &&
                            s.ws.d_k % (2 * kLanes) == 0;
  const std::int64_t live_rows = s.plan.group * s.item.queries;
  // A vector target decodes every single tile from the rows; a tile target only pair decodes of at
  // most kDecodeRows live rows (its f32 rows would not fit the registers of a 16-row tile).
  const bool decode = Isa::kTiles ? decode_pairs && live_rows <= kDecodeRows : s.ws.rows == kTileRows;
  if (decode) {
    if (decode_pairs) prepare_query_pairs(s.ws, 2 * pair_count(s.ws.d_k));
    return with_live_rows<kDecodeRows>(live_rows, [&](auto rows) {
      if constexpr (Isa::kDotBf16) {
        if (decode_pairs) {
          DecodeFromRows<rows(), true> path{s};
          return stream_key_blocks(path, s);
        }
      }
      if constexpr (!Isa::kTiles) {
        DecodeFromRows<rows()> path{s};
        stream_key_blocks(path, s);
      }
    });
  }
  if constexpr (Isa::kTiles) {
    if (bf16_dot) return stream_tile_item<Bf16Pairs<>>(s);
  }
  if constexpr (Isa::kTilesF16) {
    if (uses_f16_tiles(p)) return stream_tile_item<F16Pairs<>>(s);
  }
  if constexpr (Isa::kDotBf16 && !Isa::kTiles) {
    if (bf16_dot) {
      prepare_query_pairs(s.ws, 2 * pair_count(s.ws.d_k));
      PackedPairs<> path{s};
      return stream_key_blocks(path, s);
    }
  }
  PackedF32 path{s};
  stream_key_blocks(path, s);
}

void run_item(const ForwardPlan& plan, std::int64_t item_index, std::int64_t split) {
  const ItemCoordinates item = item_coordinates(plan, item_index);
  if (split >= item.splits) return;  // a packed sequence split into fewer key ranges than the most
  ForwardWorkspace& ws = thread_workspace();
  ws.prepare(round_up(plan.group * item.queries, kTileRows), plan.problem->sizes.d_k, plan.padded_d_v);
  prepare_rows(plan, ws, item);
  // Keys past the entry's own count (a cached or packed sequence shorter than m) are never touched:
  // they may lie in blocks the sequence does not hold, or belong to the next sequence.
  const std::int64_t begin = split_begin(item, split);
  const std::int64_t key_end = std::min(split_end(plan, item, split), plan.problem->key_count(item.batch));
  const KeyRange keys{begin, std::max(key_end, begin)};
  const std::int64_t live_rows = plan.group * item.queries;
  const ItemStream s = item_stream(plan, ws, item, keys);
  auto stream = [&](float headroom) {
    ws.headroom = headroom;
    std::fill(ws.row_max, ws.row_max + ws.rows, kMinusInf);
    std::fill(ws.row_sum, ws.row_sum + ws.rows, 0.0f);
    std::fill(ws.acc, ws.acc + ws.rows * ws.d_v, 0.0f);
    stream_item(s);
    ws.headroom = 0;
  };
  stream(0);
  // Σ p·v of large finite values can overflow although the output, a weighted mean, is finite: the
  // item is then streamed again with headroom (core/softmax_partial.hpp), which scales every p down
  // so that no sum can. Checking costs a pass over the accumulators; only items with a non-finite
  // one (overflow, or NaN and ±inf from the inputs, which the second pass reproduces) pay twice.
  if (!all_finite(ws.acc, live_rows * ws.d_v)) {
    stream(detail::SoftmaxPartial::headroom_for(keys.end - keys.begin, plan.problem->f32.keep_scale));
  }

  for (std::int64_t r = 0; r < live_rows; ++r) {
    float* acc = ws.acc + r * ws.d_v;
    if (item.splits > 1) {
      plan.partial(item_index, split, r).store({.max = ws.row_max[r], .sum = ws.row_sum[r], .acc = acc}, ws.d_v);
    } else {
      finalize_row(plan, item_index, r, ws.row_info[r].head, ws.row_info[r].query,
                   {.max = ws.row_max[r], .sum = ws.row_sum[r], .acc = acc});
    }
  }
}

#include "cpu/forward_probabilities.inl"
#include "cpu/kernel_hooks.inl"

}  // namespace attnkit::cpu::ATTNKIT_ISA_NAMESPACE
