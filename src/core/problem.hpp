// A validated attention call: the views, their sizes and the resolved options. Built once at the API
// edge (src/api/validate.cpp); every kernel below trusts it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

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
  // Keys quantised per channel (attnkit/quantized.hpp, quantize_channel_group): tokens per group; an
  // entry's keys before its length rounded down to a multiple of it are in groups. 0: none are.
  std::int64_t key_channel_group = 0;
};

// A packed variable-length batch (attnkit/varlen.hpp): sequence b's queries are rows
// query_offsets[b] .. query_offsets[b + 1] of dimension 2 of q (and of out, lse, d_out, dq), its
// keys rows key_offsets[b] .. key_offsets[b + 1] of k and v (and dk, dv); dimension 0 of those views
// has size 1. Every option applies per sequence, in the sequence's own positions (i, j from 0).
struct PackedOffsets {
  const std::int64_t* query_offsets = nullptr;  // B + 1, from 0, non-decreasing
  const std::int64_t* key_offsets = nullptr;    // B + 1, from 0, non-decreasing
};

// The scalars the fast kernels compute with, rounded to float32 once per call.
struct Float32Scalars {
  float scale = 1;
  float softcap = 0;            // 0: off
  float dropout_threshold = 0;  // a key is kept when its uniform is at least this; 0: no dropout
  float keep_scale = 1;         // 1/(1 − dropout_p), the kept keys' multiplier
};

struct Problem {
  Sizes sizes;
  Kernel kernel = Kernel::reference;  // resolved: the backend that runs the call (never automatic)
  Target target = Target::scalar;     // the SIMD target the fast kernel runs on (when kernel is fast)
  ConstTensorView q, k, v;
  // The options, resolved once (resolve_options / take_options): kernels read these, never the
  // options. The spans point into the caller's memory, like the options' own.
  double scale = 1.0;  // options.scale or 1/sqrt(d_k)
  Causal causal = Causal::none;
  Window window;
  double softcap = 0.0;  // 0: off
  double dropout_p = 0.0;
  std::uint64_t seed = 0;  // of the dropout stream
  std::span<const std::int64_t> key_lengths;  // empty, or one per batch entry
  std::span<const float> alibi_slopes;        // empty, or one per query head
  std::span<const float> sinks;               // empty, or one logit per query head
  Float32Scalars f32;
  MaskKind mask_kind = MaskKind::none;
  ConstTensorView mask;  // rank 4, broadcast dimensions have stride 0
  const CachedKeys* cached = nullptr;     // set only by attention over a KV cache (forward only)
  const PackedOffsets* packed = nullptr;  // set only by a packed variable-length batch (varlen.hpp)

  // Takes the options' values and the resolved scale; the mask is resolved separately (its view
  // needs checking against the sizes).
  void take_options(const AttentionOptions& o, double resolved_scale) {
    scale = resolved_scale;
    causal = o.causal;
    window = o.window;
    softcap = o.softcap;
    dropout_p = o.dropout_p;
    seed = o.seed;
    key_lengths = o.key_lengths;
    alibi_slopes = o.alibi_slopes;
    sinks = o.sinks;
    f32.scale = static_cast<float>(scale);
    f32.softcap = static_cast<float>(softcap);
    // Uniforms are multiples of 2^-24 (uniform_from_bits), so u >= p exactly when u is at least p
    // rounded up to that grid, a float with no rounding. p rounded to the nearest float instead
    // kept the key whose uniform equals that float when p lies just above it, where the reference
    // (u >= p in double) drops it: one output off by a probability's worth in a soak run.
    f32.dropout_threshold = static_cast<float>(std::ceil(dropout_p * 0x1p24) * 0x1p-24);
    f32.keep_scale = static_cast<float>(1.0 / (1.0 - dropout_p));
  }

  // Queries of batch entry b: n, or the packed sequence's own count (n is then the largest).
  std::int64_t query_count(std::int64_t b) const {
    return packed != nullptr ? packed->query_offsets[b + 1] - packed->query_offsets[b] : sizes.n;
  }
  // Keys that exist for batch entry b: m, or the cached or packed sequence's own count.
  std::int64_t key_count(std::int64_t b) const {
    if (cached != nullptr) return cached->lengths[b];
    return packed != nullptr ? packed->key_offsets[b + 1] - packed->key_offsets[b] : sizes.m;
  }

  // The aligned position i' of query i of entry b (docs/semantics.md): bottom-right alignment lines
  // the entry's last query up with its last key, i' = i + (keys − queries); otherwise i' = i.
  std::int64_t aligned_position(std::int64_t b, std::int64_t i) const {
    return causal == Causal::bottom_right ? i + (key_count(b) - query_count(b)) : i;
  }

  // The keys [first, last] that query i of entry b may see before masks, and its aligned position
  // they were cut around: the entry's keys, cut by causal alignment, the window and key_lengths
  // (last < first: none). ALiBi and masks act per key.
  struct VisibleKeys {
    std::int64_t position, first, last;
  };
  VisibleKeys visible_keys(std::int64_t b, std::int64_t i) const {
    const std::int64_t pos = aligned_position(b, i);
    VisibleKeys keys{pos, 0, key_count(b) - 1};
    if (causal != Causal::none) keys.last = std::min(keys.last, pos);
    // Compared as distances, which are bounded by the sizes: pos − left and pos + right would
    // overflow for sides near INT64_MAX, which mean "unbounded" like −1 (docs/semantics.md, Limits).
    if (window.left >= 0 && pos - keys.first > window.left) keys.first = pos - window.left;
    if (window.right >= 0 && keys.last - pos > window.right) keys.last = pos + window.right;
    if (!key_lengths.empty()) keys.last = std::min(keys.last, key_lengths[static_cast<std::size_t>(b)] - 1);
    return keys;
  }
  float alibi_slope(std::int64_t h) const {
    return alibi_slopes.empty() ? 0.0f : alibi_slopes[static_cast<std::size_t>(h)];
  }
};

// Where key (and value) row j of batch entry b is stored: index [b, ·, j] of k and v (and dk, dv),
// its row of the packed keys, or, for a KV cache, its row of the block its block table lists. One
// definition for every backend.
struct StoredRow {
  std::int64_t outer, row;  // indices of the view's dimensions 0 and 2
};
inline StoredRow stored_row(const Problem& p, std::int64_t batch, std::int64_t j) {
  if (p.packed != nullptr) return {0, p.packed->key_offsets[batch] + j};
  if (p.cached == nullptr) return {batch, j};
  const CachedKeys& c = *p.cached;
  return {c.block_table[batch * c.blocks_per_sequence + (j >> c.block_shift)], j & ((std::int64_t{1} << c.block_shift) - 1)};
}

// The keys of entry b stored in groups quantised per channel: keys [0, grouped_keys) (a multiple of
// the group), 0 unless the KV cache quantises its keys so.
inline std::int64_t grouped_keys(const Problem& p, std::int64_t batch) {
  if (p.cached == nullptr || p.cached->key_channel_group == 0) return 0;
  return p.cached->lengths[batch] / p.cached->key_channel_group * p.cached->key_channel_group;
}

// rows[i] = the record of key j0 + i of entry b and KV head g, for the group's keys from j0 (a
// multiple of the group); every row of a group lies in one block (a paged cache's block size is a
// multiple of the group).
inline void channel_group_rows(const Problem& p, std::int64_t batch, std::int64_t g, std::int64_t j0, const std::byte** rows) {
  const StoredRow first = stored_row(p, batch, j0);
  const std::byte* row = p.k.at<std::byte>({first.outer, g, first.row, 0});
  for (std::int64_t i = 0; i < p.cached->key_channel_group; ++i) rows[i] = row + i * p.k.stride(2);
}

// Where query row i of batch entry b is stored in q, out, lse, d_out and dq: index [b, ·, i], or its
// row of the packed queries.
inline StoredRow query_row(const Problem& p, std::int64_t batch, std::int64_t i) {
  if (p.packed != nullptr) return {0, p.packed->query_offsets[batch] + i};
  return {batch, i};
}

struct ForwardOutputs {
  TensorView out;
  std::optional<TensorView> lse;
  std::optional<TensorView> probs;
};

struct BackwardIO {
  ConstTensorView out, d_out, lse;
  TensorView dq, dk, dv;
  std::optional<TensorView> d_sinks;  // [Hq] f32, with sinks: their gradient
};

}  // namespace attnkit::detail
