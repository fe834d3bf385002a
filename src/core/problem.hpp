// A validated attention call: the views, their sizes and the resolved options. Built once at the API
// edge (src/api/validate.cpp); every kernel below trusts it.
#pragma once

#include <cstdint>
#include <optional>

#include "attnkit/attention.hpp"
#include "attnkit/targets.hpp"

namespace attnkit::detail {

struct Sizes {
  std::int64_t batch = 0;     // B
  std::int64_t q_heads = 0;   // Hq
  std::int64_t kv_heads = 0;  // Hkv
  std::int64_t n = 0;         // queries
  std::int64_t m = 0;         // keys
  std::int64_t d_k = 0;
  std::int64_t d_v = 0;

  std::int64_t group() const { return q_heads / kv_heads; }  // query heads per KV head
  std::int64_t kv_head_of(std::int64_t h) const { return h / group(); }
};

enum class MaskKind : std::uint8_t { none, keep, additive };

// Keys and values of a KV cache (attnkit/kv_cache.hpp), read in place: k and v are the cache's block
// pools [blocks, Hkv, 2^block_shift, d], and key j of batch entry b is row j mod 2^block_shift of
// block block_table[b · blocks_per_sequence + (j >> block_shift)] (a shift, not a division: it runs
// for every key row). Entry b has lengths[b] keys (m is the largest), and under
// Causal::bottom_right its queries align with its own last key.
struct CachedKeys {
  const std::int64_t* block_table = nullptr;
  std::int64_t blocks_per_sequence = 0;
  int block_shift = 0;
  const std::int64_t* lengths = nullptr;
};

struct Problem {
  Sizes sizes;
  Kernel kernel = Kernel::reference;  // resolved: the backend that runs the call (never automatic)
  Target target = Target::scalar;     // the SIMD target the fast kernel runs on (when kernel is fast)
  ConstTensorView q, k, v;
  double scale = 1.0;        // resolved: options.scale or 1/sqrt(d_k)
  // The options' scalars, taken once (take_options): kernels read these, not the options.
  Causal causal = Causal::none;
  double softcap = 0.0;      // 0: off
  double dropout_p = 0.0;
  std::uint64_t seed = 0;    // of the dropout stream
  MaskKind mask_kind = MaskKind::none;
  ConstTensorView mask;      // rank 4, broadcast dimensions have stride 0
  const AttentionOptions* options = nullptr;  // for what is not a scalar: window, key lengths, ALiBi slopes
  const CachedKeys* cached = nullptr;  // set only by attention over a KV cache (forward only)

  void take_options(const AttentionOptions& o) {
    options = &o;
    causal = o.causal;
    softcap = o.softcap;
    dropout_p = o.dropout_p;
    seed = o.seed;
  }

  // Keys that exist for batch entry b: m, or the cached sequence's length.
  std::int64_t key_count(std::int64_t b) const { return cached != nullptr ? cached->lengths[b] : sizes.m; }

  // The aligned position i' of query i of entry b (docs/semantics.md): bottom-right alignment lines
  // the last query up with the entry's last key, i' = i + (keys − n); otherwise i' = i.
  std::int64_t aligned_position(std::int64_t b, std::int64_t i) const {
    return causal == Causal::bottom_right ? i + (key_count(b) - sizes.n) : i;
  }
};

// Where key (and value) row j of batch entry b is stored: index [b, ·, j] of k and v, or, for a KV
// cache, its row of the block its block table lists. One definition for every backend.
struct StoredRow {
  std::int64_t outer, row;  // indices of the view's dimensions 0 and 2
};
inline StoredRow stored_row(const Problem& p, std::int64_t batch, std::int64_t j) {
  if (p.cached == nullptr) return {batch, j};
  const CachedKeys& c = *p.cached;
  return {c.block_table[batch * c.blocks_per_sequence + (j >> c.block_shift)], j & ((std::int64_t{1} << c.block_shift) - 1)};
}

struct ForwardOutputs {
  TensorView out;
  std::optional<TensorView> lse;
  std::optional<TensorView> probs;
};

struct BackwardIO {
  ConstTensorView out, d_out, lse;
  TensorView dq, dk, dv;
};

}  // namespace attnkit::detail
