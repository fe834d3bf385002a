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

// A grow-only block of memory, 64-byte aligned, zeroed when it grows (so every page is touched
// once, there, and not in a kernel's hot loop).
class WorkspaceBuffer {
 public:
  // Grows the block to at least `bytes` if it is smaller (its contents are then lost) and returns
  // it. Throws Error(out_of_memory), naming `owner`, if the memory cannot be had.
  std::byte* reserve(std::size_t bytes, const char* owner);

 private:
  static constexpr std::align_val_t kAlignment{64};
  struct Free {
    void operator()(std::byte* p) const noexcept { ::operator delete(p, kAlignment); }
  };
  std::unique_ptr<std::byte, Free> buffer_;
  std::size_t capacity_ = 0;
};

struct ForwardWorkspace {
  // Sizes, in elements.
  std::int64_t rows = 0, d_k = 0, d_v = 0;  // rows padded to whole tiles; d_v padded to the tile width
  float* q = nullptr;          // [rows][d_k]            queries as float32 (unscaled)
  // A target lays its key block out in these arrays with its own key block and tile (geometry.hpp);
  // they are sized for the largest.
  float* k_t = nullptr;        // [key block / tile width][d_k][tile width]  current key block, in panels
  float* v = nullptr;          // [key block][d_v]       current value block
  float* scores = nullptr;     // [tile rows][key block] logits, then probabilities, of one tile
  float* acc = nullptr;        // [rows][d_v]            running Σ p·v
  float* row_max = nullptr;    // [rows]                 running max of the logits
  float* row_sum = nullptr;    // [rows]                 running Σ p
  float* mask_row = nullptr;   // [key block]            one row of a mask, converted
  float* key_rows = nullptr;   // [tile width][d_k]      key rows converted to f32 for packing
  float* zero_row = nullptr;   // [d_k]                  zeros: the padding keys of the last panel
  std::uint8_t* seen = nullptr;  // [tile rows][key block] visible keys, for blocks with non-finite v
  RowInfo* row_info = nullptr;   // [rows]
  // Added to every running max (core/softmax_partial.hpp's headroom): 0, except when a row is redone
  // because its accumulator overflowed; then p = e^(s − max − headroom) keeps Σ p·v finite.
  float headroom = 0;
  // The bf16-dot path (targets with vdpbf16ps; bf16 q, k, v) keeps bf16 bits in pairs: q_bf16 holds
  // the queries as bf16 rows of even length (d_k rounded up), p_pairs one tile's rounded
  // probabilities, bf16_rows two value rows converted for interleaving (and, as d_v floats, the one
  // value row pack_values converts). The key panels and value
  // pairs reuse k_t and v.
  std::uint16_t* q_bf16 = nullptr;    // [rows][d_k rounded up to even]
  std::uint32_t* p_pairs = nullptr;   // [tile rows][key block / 2]
  std::uint16_t* bf16_rows = nullptr; // [2][d_v]

  // Lays the arrays out for these sizes, growing the buffer if needed.
  void prepare(std::int64_t padded_rows, std::int64_t d_k_, std::int64_t padded_d_v) {
    rows = padded_rows;
    d_k = d_k_;
    d_v = padded_d_v;
    using detail::ByteCount;
    std::byte* cursor = buffer_.reserve(bytes_for(ByteCount::of(rows), ByteCount::of(d_k), ByteCount::of(d_v)).value(),
                                        "the fast kernel's workspace");
    const Layout layout = layout_for(ByteCount::of(rows), ByteCount::of(d_k), ByteCount::of(d_v));
    float* q_bf16_floats = nullptr;
    float* p_pairs_floats = nullptr;
    float* bf16_rows_floats = nullptr;
    float** arrays[] = {&q,        &k_t,      &v,        &scores,        &acc,           &row_max,
                        &row_sum,  &mask_row, &key_rows, &zero_row,      &q_bf16_floats, &p_pairs_floats,
                        &bf16_rows_floats};
    static_assert(std::size(arrays) == std::size(Layout{}.floats));
    for (std::size_t a = 0; a < std::size(arrays); ++a) {
      *arrays[a] = reinterpret_cast<float*>(cursor);
      cursor += aligned(layout.floats[a].value() * sizeof(float));
    }
    q_bf16 = reinterpret_cast<std::uint16_t*>(q_bf16_floats);
    p_pairs = reinterpret_cast<std::uint32_t*>(p_pairs_floats);
    bf16_rows = reinterpret_cast<std::uint16_t*>(bf16_rows_floats);
    seen = reinterpret_cast<std::uint8_t*>(cursor);
    cursor += aligned(static_cast<std::size_t>(kMaxTileRows * kMaxKeyBlock));
    row_info = reinterpret_cast<RowInfo*>(cursor);
    std::fill(zero_row, zero_row + d_k, 0.0f);
  }

  // The bytes prepare() needs for these sizes; saturates rather than wraps, so callers can check a
  // request against the memory budget before anything is allocated.
  static detail::ByteCount bytes_for(detail::ByteCount padded_rows, detail::ByteCount d_k_, detail::ByteCount padded_d_v) {
    const Layout layout = layout_for(padded_rows, d_k_, padded_d_v);
    detail::ByteCount bytes = 0;
    for (detail::ByteCount n : layout.floats) bytes += aligned(n * sizeof(float));
    bytes += aligned(static_cast<std::size_t>(kMaxTileRows * kMaxKeyBlock));
    bytes += aligned(padded_rows * sizeof(RowInfo));
    return bytes;
  }

 private:
  static constexpr std::size_t kAlignment = 64;
  static std::size_t aligned(std::size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }
  static detail::ByteCount aligned(detail::ByteCount bytes) { return bytes + (kAlignment - 1); }  // an upper bound
  // The float arrays' lengths, in the order prepare() lays them out.
  struct Layout {
    detail::ByteCount floats[13];
  };
  static Layout layout_for(detail::ByteCount r, detail::ByteCount dk, detail::ByteCount dv) {
    using detail::ByteCount;
    const ByteCount block = ByteCount::of(kMaxKeyBlock);
    return {{r * dk, dk * block, block * dv, ByteCount::of(kMaxTileRows) * block, r * dv, r, r, block,
             ByteCount::of(kMaxTileCols) * dk, dk, r * (dk + 1), ByteCount::of(kMaxTileRows) * block, dv}};
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
  float* zero_row = nullptr;  // [max(d_k, d_v)]       zeros: the padding keys of a block
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

  void prepare(std::int64_t padded_d_k, std::int64_t padded_d_v);
  // The bytes prepare() needs (saturating), for the memory check before a call.
  static detail::ByteCount bytes_for(detail::ByteCount padded_d_k, detail::ByteCount padded_d_v);

 private:
  WorkspaceBuffer buffer_;
};

// The calling thread's workspaces (thread_local, reused across calls).
ForwardWorkspace& thread_workspace();
BackwardWorkspace& thread_backward_workspace();

}  // namespace attnkit::cpu
