// Per-thread scratch of the fast forward kernel: one named struct that knows its size. Each worker
// thread keeps one and reuses it across calls (it only grows), so the hot loop never allocates and
// fresh pages are touched once, not per call.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "core/memory.hpp"
#include "cpu/visibility.hpp"

namespace attnkit::cpu {

// Block sizes shared by every target; each must be a multiple of every target's tile width.
inline constexpr std::int64_t kKeyBlock = 128;      // keys streamed per step: K and V blocks stay in L2
inline constexpr std::int64_t kTileRows = 6;        // query rows per register tile
inline constexpr std::int64_t kRowsPerItem = 192;    // query rows (over a GQA group) per work item
inline constexpr std::int64_t kDecodeQueries = 16;  // n at or below this is decoding: keys are split
inline constexpr std::int64_t kSplitKeys = 1024;    // keys per split when decoding (fixed: results
                                                    // must not depend on the thread count)
inline constexpr std::int64_t kMaxTileCols = 16;    // the widest target's register tile (AVX2: 2 × 8)
static_assert(kRowsPerItem % kTileRows == 0, "a work item holds whole register tiles");
static_assert(kSplitKeys % kKeyBlock == 0, "a split holds whole key blocks");

// The backward's blocks.
inline constexpr std::int64_t kBackwardKeyBlock = 96;    // keys per step: K, V, dK, dV blocks stay in L2
inline constexpr std::int64_t kBackwardKeyPad = 48;      // key blocks padded to whole tiles of rows and columns
inline constexpr std::int64_t kBackwardQueryBlock = 48;  // query rows whose dK, dV contributions are summed at once
inline constexpr std::int64_t kBackwardMinItems = 8;     // chunks per (batch, KV head) until there are this many items
static_assert(kBackwardKeyBlock % kBackwardKeyPad == 0 && kBackwardKeyPad % kTileRows == 0 &&
                  kBackwardKeyPad % kMaxTileCols == 0 && kBackwardQueryBlock % kTileRows == 0,
              "backward blocks hold whole register tiles");

struct ForwardWorkspace {
  // Sizes, in elements.
  std::int64_t rows = 0, d_k = 0, d_v = 0;  // rows padded to whole tiles; d_v padded to the tile width
  float* q = nullptr;          // [rows][d_k]            queries times the scale
  float* k_t = nullptr;        // [kKeyBlock / tile width][d_k][tile width]  current key block, in panels
  float* v = nullptr;          // [kKeyBlock][d_v]       current value block
  float* scores = nullptr;     // [kTileRows][kKeyBlock] logits, then probabilities, of one tile
  float* acc = nullptr;        // [rows][d_v]            running Σ p·v
  float* row_max = nullptr;    // [rows]                 running max of the logits
  float* row_sum = nullptr;    // [rows]                 running Σ p
  float* mask_row = nullptr;   // [kKeyBlock]            one row of a mask, converted
  float* key_rows = nullptr;   // [kMaxTileCols][d_k]    key rows converted to f32 for packing
  float* zero_row = nullptr;   // [d_k]                  zeros: the padding keys of the last panel
  std::uint8_t* seen = nullptr;  // [kTileRows][kKeyBlock] visible keys, for blocks with non-finite v
  RowInfo* row_info = nullptr;   // [rows]

  // Lays the arrays out for these sizes, growing the buffer if needed.
  void prepare(std::int64_t padded_rows, std::int64_t d_k_, std::int64_t padded_d_v) {
    rows = padded_rows;
    d_k = d_k_;
    d_v = padded_d_v;
    using detail::ByteCount;
    reserve(bytes_for(ByteCount::of(rows), ByteCount::of(d_k), ByteCount::of(d_v)).value());
    const Layout layout = layout_for(ByteCount::of(rows), ByteCount::of(d_k), ByteCount::of(d_v));
    std::byte* cursor = buffer_.get();
    float** arrays[] = {&q, &k_t, &v, &scores, &acc, &row_max, &row_sum, &mask_row, &key_rows, &zero_row};
    for (std::size_t a = 0; a < std::size(arrays); ++a) {
      *arrays[a] = reinterpret_cast<float*>(cursor);
      cursor += aligned(layout.floats[a].value() * sizeof(float));
    }
    seen = reinterpret_cast<std::uint8_t*>(cursor);
    cursor += aligned(static_cast<std::size_t>(kTileRows * kKeyBlock));
    row_info = reinterpret_cast<RowInfo*>(cursor);
    std::fill(zero_row, zero_row + d_k, 0.0f);
  }

  // The bytes prepare() needs for these sizes; saturates rather than wraps, so callers can check a
  // request against the memory budget before anything is allocated.
  static detail::ByteCount bytes_for(detail::ByteCount padded_rows, detail::ByteCount d_k_, detail::ByteCount padded_d_v) {
    const Layout layout = layout_for(padded_rows, d_k_, padded_d_v);
    detail::ByteCount bytes = 0;
    for (detail::ByteCount n : layout.floats) bytes += aligned(n * sizeof(float));
    bytes += aligned(static_cast<std::size_t>(kTileRows * kKeyBlock));
    bytes += aligned(padded_rows * sizeof(RowInfo));
    return bytes;
  }

 private:
  static constexpr std::size_t kAlignment = 64;
  static std::size_t aligned(std::size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }
  static detail::ByteCount aligned(detail::ByteCount bytes) { return bytes + (kAlignment - 1); }  // an upper bound
  // The float arrays' lengths, in the order prepare() lays them out.
  struct Layout {
    detail::ByteCount floats[10];
  };
  static Layout layout_for(detail::ByteCount r, detail::ByteCount dk, detail::ByteCount dv) {
    using detail::ByteCount;
    const ByteCount block = ByteCount::of(kKeyBlock);
    return {{r * dk, dk * block, block * dv, ByteCount::of(kTileRows) * block, r * dv, r, r, block,
             ByteCount::of(kMaxTileCols) * dk, dk}};
  }
  struct Free {
    void operator()(std::byte* p) const noexcept { std::free(p); }
  };
  void reserve(std::size_t bytes);

  std::unique_ptr<std::byte, Free> buffer_;
  std::size_t capacity_ = 0;
};

// Per-thread scratch of the fast backward kernel, grown and reused like the forward's.
struct BackwardWorkspace {
  std::int64_t d_k = 0, d_v = 0;  // padded to the widest tile width
  float* k_panels = nullptr;  // [kBackwardKeyBlock / tile width][d_k][tile width]  K_j for scores
  float* k_rows = nullptr;    // [kBackwardKeyBlock][d_k]  K_j row by row, for dQ += dS·K_j
  float* v_panels = nullptr;  // [kBackwardKeyBlock / tile width][d_v][tile width]  V_j for dP
  float* v_rows = nullptr;    // [kBackwardKeyBlock][d_v]  V_j row by row, converted
  float* dk_acc = nullptr;    // [kBackwardKeyBlock][d_k]  dK_j, summed over the group's query rows
  float* dv_acc = nullptr;    // [kBackwardKeyBlock][d_v]  dV_j, likewise
  float* p = nullptr;         // [kBackwardQueryBlock][kBackwardKeyBlock]  logits, then dropout(P)
  float* ds = nullptr;        // [kBackwardQueryBlock][kBackwardKeyBlock]  dP, then dS
  float* tanh_s = nullptr;     // [kBackwardQueryBlock][kBackwardKeyBlock]  tanh(s/c) when softcapped
  float* keep = nullptr;      // [kBackwardKeyBlock]   one row's dropout multipliers
  float* mask_row = nullptr;  // [kBackwardKeyBlock]   one row of a mask, converted
  float* zero_row = nullptr;  // [max(d_k, d_v)]       zeros: the padding keys of a block
  std::uint8_t* seen = nullptr;  // [kBackwardQueryBlock][kBackwardKeyBlock] visible keys, when an input is not finite
  RowInfo* row_info = nullptr;   // [kBackwardQueryBlock]

  void prepare(std::int64_t padded_d_k, std::int64_t padded_d_v);
  // The bytes prepare() needs (saturating), for the memory check before a call.
  static detail::ByteCount bytes_for(detail::ByteCount padded_d_k, detail::ByteCount padded_d_v);

 private:
  struct Free {
    void operator()(std::byte* p) const noexcept { std::free(p); }
  };
  std::unique_ptr<std::byte, Free> buffer_;
  std::size_t capacity_ = 0;
};

// The calling thread's workspaces (thread_local, reused across calls).
ForwardWorkspace& thread_workspace();
BackwardWorkspace& thread_backward_workspace();

}  // namespace attnkit::cpu
