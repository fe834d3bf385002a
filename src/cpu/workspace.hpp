// Per-thread scratch of the fast forward kernel: one named struct that knows its size. Each worker
// thread keeps one and reuses it across calls (it only grows), so the hot loop never allocates and
// fresh pages are touched once, not per call.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>

#include "core/memory.hpp"
#include "cpu/geometry.hpp"
#include "cpu/visibility.hpp"

namespace attnkit::cpu {

inline constexpr std::size_t kWorkspaceAlignment = 64;

// A grow-only block of memory, 64-byte aligned, zeroed when it grows (so every page is touched
// once, there, and not in a kernel's hot loop).
class WorkspaceBuffer {
 public:
  // Grows the block to at least `bytes` if it is smaller (its contents are then lost) and returns
  // it. Throws Error(out_of_memory), naming `owner`, if the memory cannot be had.
  std::byte* reserve(std::size_t bytes, const char* owner);

 private:
  static constexpr std::align_val_t kAlignment{kWorkspaceAlignment};
  struct Free {
    void operator()(std::byte* p) const noexcept { ::operator delete(p, kAlignment); }
  };
  std::unique_ptr<std::byte, Free> buffer_;
  std::size_t capacity_ = 0;
};

// A workspace's arrays lie one after another in its buffer, each starting on a 64-byte boundary
// and padded to a multiple of 64 bytes. A workspace's lay_out() takes its arrays in order with
// take<T>(count); run on a SizingArena it counts the bytes, run on a PlacingArena it hands out the
// arrays of a buffer that size. The one sequence of calls does both, so the size and the layout
// cannot disagree.

// Counts the bytes of the arrays taken, in saturating arithmetic (sizes come from the caller, and are
// checked against the memory budget before anything is allocated). Hands out no memory.
class SizingArena {
 public:
  using Count = detail::ByteCount;
  static Count count(std::int64_t n) { return Count::of(n); }
  template <class T>
  T* take(Count count) {
    const Count padded = count * sizeof(T) + (kWorkspaceAlignment - 1);
    bytes_ += padded.saturated() ? padded : Count(padded.value() / kWorkspaceAlignment * kWorkspaceAlignment);
    return nullptr;
  }
  Count bytes() const { return bytes_; }

 private:
  Count bytes_ = 0;
};

// Hands out the arrays of a buffer that a SizingArena sized for the same sequence of take() calls.
class PlacingArena {
 public:
  using Count = std::int64_t;
  static Count count(std::int64_t n) { return n; }
  explicit PlacingArena(std::byte* buffer) : cursor_(buffer) {}
  template <class T>
  T* take(Count count) {
    T* array = reinterpret_cast<T*>(cursor_);
    const std::size_t bytes = static_cast<std::size_t>(count) * sizeof(T);
    cursor_ += (bytes + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment;
    return array;
  }

 private:
  std::byte* cursor_;
};

struct ForwardWorkspace {
  // Sizes, in elements.
  std::int64_t rows = 0, d_k = 0, d_v = 0;  // rows padded to whole tiles; d_v padded to the tile width
  float* q = nullptr;          // [rows][d_k]            queries as float32 (unscaled)
  // A target lays its key block out in these arrays with its own key block and tile (geometry.hpp);
  // they are sized for the largest.
  float* k_t = nullptr;        // [key block / tile width][d_k][tile width]  current key block, in panels
  float* v = nullptr;          // [key block][d_v]       current value block
  float* scores = nullptr;     // [2 · tile rows][key block] logits, then probabilities, of one tile (two on
                               // the tile path, whose products take pairs of tiles)
  float* acc = nullptr;        // [rows][d_v]            running Σ p·v
  float* row_max = nullptr;    // [rows]                 running max of the logits
  float* row_sum = nullptr;    // [rows]                 running Σ p
  float* mask_row = nullptr;   // [key block]            one row of a mask, converted
  float* key_rows = nullptr;   // [tile width][d_k]      key rows converted to f32 for packing
  float* zero_row = nullptr;   // [d_k]                  zeros: the padding keys of the last panel
  float* channel_params = nullptr;  // [4][d_k]        a key group's per-channel scales, offsets, and pairs as read
  std::uint8_t* seen = nullptr;  // [tile rows][key block] visible keys, for blocks with non-finite v
  RowInfo* row_info = nullptr;   // [rows]
  // Added to every running max (core/softmax_partial.hpp's headroom): 0, except when a row is redone
  // because its accumulator overflowed; then p = e^(s − max − headroom) keeps Σ p·v finite.
  float headroom = 0;
  // The bf16-dot path (targets with vdpbf16ps; bf16 q, k, v) keeps bf16 bits in pairs: q_bf16 holds
  // the queries as bf16 rows of even length (d_k rounded up), p_pairs one tile's (two on the tile path) rounded
  // probabilities, bf16_rows two value rows converted for interleaving (and, as d_v floats, the one
  // value row pack_values converts). The key panels and value pairs reuse k_t and v.
  std::uint16_t* q_bf16 = nullptr;    // [rows][d_k rounded up to even, or to kTileDepth on tile targets]
  std::uint32_t* p_pairs = nullptr;   // [2 · tile rows][key block / 2]
  std::uint16_t* bf16_rows = nullptr; // [2][d_v]

  // Lays the arrays out for these sizes, growing the buffer if needed.
  void prepare(std::int64_t padded_rows, std::int64_t d_k_, std::int64_t padded_d_v) {
    rows = padded_rows;
    d_k = d_k_;
    d_v = padded_d_v;
    using detail::ByteCount;
    PlacingArena arena(buffer_.reserve(bytes_for(ByteCount::of(rows), ByteCount::of(d_k), ByteCount::of(d_v)).value(),
                                       "the fast kernel's workspace"));
    lay_out(arena, *this, rows, d_k, d_v);
    std::fill(zero_row, zero_row + d_k + kTileDepth, 0.0f);
  }

  // The bytes prepare() needs for these sizes; saturates rather than wraps, so callers can check a
  // request against the memory budget before anything is allocated.
  static detail::ByteCount bytes_for(detail::ByteCount padded_rows, detail::ByteCount d_k_, detail::ByteCount padded_d_v) {
    SizingArena arena;
    ForwardWorkspace unused;
    lay_out(arena, unused, padded_rows, d_k_, padded_d_v);
    return arena.bytes();
  }

 private:
  // The arrays in layout order. q_bf16 is given room for rows·(d_k + kTileDepth) values, twice what
  // it holds. k_t, key_rows and zero_row have
  // kTileDepth more per key than d_k floats: the tile kernels pad d_k to whole tile rows of bf16 values.
  template <class Arena>
  static void lay_out(Arena& arena, ForwardWorkspace& ws, typename Arena::Count rows, typename Arena::Count d_k,
                      typename Arena::Count d_v) {
    const typename Arena::Count block = Arena::count(kMaxKeyBlock), tile_rows = Arena::count(kMaxTileRows),
                                tile_cols = Arena::count(kMaxTileCols);
    ws.q = arena.template take<float>(rows * d_k);
    ws.k_t = arena.template take<float>((d_k + kTileDepth) * block);
    ws.v = arena.template take<float>(block * d_v);
    ws.scores = arena.template take<float>(2 * tile_rows * block);
    ws.acc = arena.template take<float>(rows * d_v);
    ws.row_max = arena.template take<float>(rows);
    ws.row_sum = arena.template take<float>(rows);
    ws.mask_row = arena.template take<float>(block);
    ws.key_rows = arena.template take<float>(tile_cols * (d_k + kTileDepth));
    ws.zero_row = arena.template take<float>(d_k + kTileDepth);
    ws.channel_params = arena.template take<float>(4 * d_k);
    ws.q_bf16 = arena.template take<std::uint16_t>(2 * rows * (d_k + kTileDepth));
    ws.p_pairs = arena.template take<std::uint32_t>(tile_rows * block);
    ws.bf16_rows = arena.template take<std::uint16_t>(2 * d_v);
    ws.seen = arena.template take<std::uint8_t>(tile_rows * block);
    ws.row_info = arena.template take<RowInfo>(rows);
  }
  WorkspaceBuffer buffer_;
};

// Per-thread scratch of the fast backward kernel, grown and reused like the forward's. "key block"
// is the running target's backward key block (Geometry::backward_key_block); the arrays are sized
// for the largest, kMaxBackwardKeyBlock.
struct BackwardWorkspace {
  std::int64_t d_k = 0, d_v = 0;  // padded to the tile width
  float* k_panels = nullptr;  // [key block / tile width][d_k][tile width]  K_j for scores
  float* k_rows = nullptr;    // [key block][d_k]  K_j row by row, for dQ += dS·K_j
  float* v_panels = nullptr;  // [key block / tile width][d_v][tile width]  V_j for dP
  float* v_rows = nullptr;    // [key block][d_v]  V_j row by row, converted
  float* dk_acc = nullptr;    // [key block][d_k]  dK_j, summed over the group's query rows
  float* dv_acc = nullptr;    // [key block][d_v]  dV_j, likewise
  float* p = nullptr;         // [kBackwardQueryBlock][key block]  logits, then dropout(P)
  float* ds = nullptr;        // [kBackwardQueryBlock][key block]  dP, then dS
  float* tanh_s = nullptr;     // [kBackwardQueryBlock][key block]  tanh(s/c) when softcapped
  float* keep = nullptr;      // [key block]   one row's dropout multipliers
  float* mask_row = nullptr;  // [key block]   one row of a mask, converted
  float* zero_row = nullptr;  // [max(d_k, d_v, block)]  zeros: the padding keys of a block, the padding pairs of rows
  float* out_row = nullptr;   // [d_v]                 one row of the forward's output, converted (D_i)
  float* dq_row = nullptr;    // [d_k]                 one row of dQ, summed over the chunks
  std::uint8_t* seen = nullptr;  // [kBackwardQueryBlock][key block] visible keys, when an input is not finite
  RowInfo* row_info = nullptr;   // [kBackwardQueryBlock]
  // The bf16-dot path (bf16 inputs on targets with bf16 dot products, flash_backward.inl): operands
  // as bf16 values, or as pairs of them in 32 bits, along the dimension each product sums over (Q and
  // dO are prepared once per call, in the plan).
  std::uint32_t* k_pair_panels = nullptr;    // [block / tile width][d_k / 2][tile width]  K_j, pairs along d_k
  std::uint32_t* v_pair_panels = nullptr;    // [block / tile width][d_v / 2][tile width]  V_j, pairs along d_v
  std::uint32_t* k_key_pairs = nullptr;      // [block / 2][d_k]   K_j, pairs along keys (dQ += dS·K_j)
  std::uint32_t* ds_pairs = nullptr;         // [query block][block / 2]  dS, pairs along keys
  std::uint32_t* p_row_pairs = nullptr;      // [query block / 2][block]  P, pairs of rows
  std::uint32_t* ds_row_pairs = nullptr;     // [query block / 2][block]  dS, pairs of rows
  std::uint16_t* pair_rows = nullptr;        // [max tile width][max(d_k, d_v)]  rows on their way into panels
  // The tile path (targets with matrix tiles): dV and dK sum over the block's rows, so their A
  // operands are P and dS with pairs of rows per key, and their B operands the block's rows of Q and
  // dO as pairs, zero past the block's rows (kBlockRowPairs pairs: whole tile rows).
  std::uint32_t* p_key_pairs = nullptr;      // [block][kBlockRowPairs]  P, pairs of rows, per key
  std::uint32_t* ds_key_pairs = nullptr;     // [block][kBlockRowPairs]  dS, likewise
  std::uint32_t* q_block_pairs = nullptr;    // [kBlockRowPairs][d_k]   the block's Q, pairs of rows
  std::uint32_t* d_out_block_pairs = nullptr;  // [kBlockRowPairs][d_v] the block's dO, pairs of rows

  void prepare(std::int64_t padded_d_k, std::int64_t padded_d_v);
  // The bytes prepare() needs (saturating), for the memory check before a call.
  static detail::ByteCount bytes_for(detail::ByteCount padded_d_k, detail::ByteCount padded_d_v);

 private:
  // The arrays in layout order (workspace.cpp).
  template <class Arena>
  static void lay_out(Arena& arena, BackwardWorkspace& ws, typename Arena::Count d_k, typename Arena::Count d_v);
  WorkspaceBuffer buffer_;
};

// The calling thread's workspaces (thread_local, reused across calls).
ForwardWorkspace& thread_workspace();
BackwardWorkspace& thread_backward_workspace();

}  // namespace attnkit::cpu
