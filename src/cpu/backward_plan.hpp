// How a validated backward call is cut into work for the fast kernel. A work item is
// (batch, KV head, key chunk): it owns the dK and dV rows of its keys outright, and adds the dQ
// contributions of its keys into its own copy of dQ, one per chunk; the copies are summed in chunk
// order afterwards. No two threads ever add into the same memory, and the chunks depend only on the
// shapes, so results are bitwise identical for any thread count.
//
// A packed variable-length batch lays out each sequence as a call on it alone would: its own key
// chunks (a long sequence is split like a lone one, a short one is not), its own padded query rows,
// and no items or rows for padding; so its gradients are bitwise those of that call.
#pragma once

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/problem.hpp"
#include "cpu/workspace.hpp"

namespace attnkit::cpu {

// The layout of one batch entry: its work items and its prepared rows.
struct BackwardEntry {
  std::int64_t first_item = 0;  // its items are (KV head, chunk), chunk fastest
  std::int64_t first_row = 0;   // its rows are (query head, query), query fastest
  std::int64_t chunks = 0;      // key chunks per KV head
  std::int64_t chunk_keys = 0;  // keys per chunk, a multiple of the target's backward key block
  std::int64_t padded_n = 0;    // queries per head, rounded up to the target's whole register tiles
};

struct BackwardPlan {
  const detail::Problem* problem = nullptr;
  const detail::BackwardIO* io = nullptr;

  std::int64_t group = 1;   // query heads per KV head
  std::int64_t items = 0;   // Σ over entries of KV heads · chunks
  std::int64_t rows = 0;    // Σ over entries of query heads · padded_n
  std::int64_t chunks = 0;  // the most chunks of any entry
  std::int64_t padded_d_k = 0, padded_d_v = 0;  // rounded up to the target's tile width
  // Every entry of a batched (not packed) call has the layout of entry 0 (`uniform`), shifted; a packed call
  // lists one per sequence.
  BackwardEntry uniform;
  const BackwardEntry* packed_entries = nullptr;

  // Prepared once per call, for every (batch, query head, query) row; padding rows are zero with
  // lse = −inf, so they see no key and add nothing.
  float* q = nullptr;              // [rows][padded_d_k]   queries in float32
  float* d_out = nullptr;          // [rows][padded_d_v]   dO in float32
  float* lse = nullptr;            // [rows]               the forward's log-sum-exp
  float* delta = nullptr;          // [rows]               D = Σ_c dO ∘ O
  std::uint8_t* finite = nullptr;  // [rows]               bit 0: q row finite, bit 1: dO row finite
  float* dq_partials = nullptr;    // [chunks][rows][padded_d_k]  each chunk's contribution to dQ
  // The gradients are linear in dO: a call whose gradients overflowed on finite inputs runs again
  // with dO scaled by 2^−gradient_exponent as it is loaded and the gradients by 2^gradient_exponent
  // as they are stored (fast_backward). 0 on the first run.
  int gradient_exponent = 0;
  std::atomic<bool>* stored_non_finite = nullptr;  // set when a stored gradient row holds NaN or ±inf
  // Only when the call takes bf16 dot products (bf16 inputs on a target that has them; else null):
  // Q and dO as bf16 values (for S and dP) and as pairs of consecutive rows (for dK and dV). Rows
  // pair within a head: padded_n is whole tiles of an even number of rows.
  std::uint16_t* q_bf16 = nullptr;           // [rows][padded_d_k]
  std::uint16_t* d_out_bf16 = nullptr;       // [rows][padded_d_v]
  std::uint32_t* q_row_pairs = nullptr;      // [rows / 2][padded_d_k]
  std::uint32_t* d_out_row_pairs = nullptr;  // [rows / 2][padded_d_v]

  BackwardEntry entry(std::int64_t batch) const {
    if (packed_entries != nullptr) return packed_entries[batch];
    BackwardEntry e = uniform;
    e.first_item = batch * problem->sizes.kv_heads * uniform.chunks;
    e.first_row = batch * problem->sizes.q_heads * uniform.padded_n;
    return e;
  }
  std::int64_t row(std::int64_t batch, std::int64_t head, std::int64_t query) const {
    const BackwardEntry e = entry(batch);
    return e.first_row + head * e.padded_n + query;
  }
  float* dq_partial(std::int64_t chunk, std::int64_t row) const {
    return dq_partials + (chunk * rows + row) * padded_d_k;
  }
};

inline constexpr std::uint8_t kQueryFinite = 1, kGradientFinite = 2;

// Before a gradient row is stored: scaled back by 2^plan.gradient_exponent (exact, a power of two),
// and a NaN or ±inf in it noted for fast_backward's check.
inline void finish_gradient_row(const BackwardPlan& plan, float* row, std::int64_t count) {
  if (plan.gradient_exponent != 0) {
    for (std::int64_t c = 0; c < count; ++c) row[c] = std::ldexp(row[c], plan.gradient_exponent);
  }
  // NaN and ±inf are the floats whose exponent bits are all set: an integer test the compiler
  // vectorises (std::isfinite per element measured 6% of a small backward's instructions; see
  // docs/tuning.md, "Keeping sums finite without slowing the common path").
  constexpr std::uint32_t kExponent = 0x7f800000u;
  std::uint32_t non_finite = 0;
  for (std::int64_t c = 0; c < count; ++c) {
    std::uint32_t bits;
    std::memcpy(&bits, row + c, sizeof bits);
    non_finite |= static_cast<std::uint32_t>((bits & kExponent) == kExponent);
  }
  if (non_finite != 0) plan.stored_non_finite->store(true, std::memory_order_relaxed);
}

}  // namespace attnkit::cpu
