// Argument checking at the API edge. Everything a kernel may assume is established here, once, and
// every failure is an attnkit::Error that names the argument, the shapes and what was expected.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "attnkit/kv_cache.hpp"
#include "attnkit/varlen.hpp"
#include "core/problem.hpp"

namespace attnkit::detail {

Problem validate_forward(ConstTensorView q, ConstTensorView k, ConstTensorView v, TensorView out,
                         const AttentionOptions& options, const ForwardExtras& extras, ForwardOutputs& outputs);

// Attention over a KV cache: q [B, Hq, n, d_k] against the cache's block pools [blocks, Hkv,
// block_size, d]; `cached` says where entry b's keys are, m is their largest count. The options
// resolve as AttentionOptions with bottom-right causal alignment.
Problem validate_cached_forward(ConstTensorView q, ConstTensorView k_pool, ConstTensorView v_pool, const CachedKeys& cached,
                                std::int64_t m, TensorView out, const CachedAttentionOptions& options,
                                ForwardOutputs& outputs);

Problem validate_backward(ConstTensorView q, ConstTensorView k, ConstTensorView v, const BackwardIO& io,
                          const AttentionOptions& options);

// A packed batch's offsets, read as int64 and checked against q's and k's packed rows: from 0,
// non-decreasing, ending at the total, as many for q as for k. `offsets` points into the vectors.
struct PackedSequences {
  std::vector<std::int64_t> query_offsets, key_offsets;
  PackedOffsets offsets;
};
void read_packed_sequences(const SequenceOffsets& offsets, ConstTensorView q, ConstTensorView k, PackedSequences& packed);

// Packed variable-length batches (attnkit/varlen.hpp). The problem's views are the packed ones seen
// as a batch of one, [1, H, total, d], with sequence b's rows found through `packed`; its sizes are
// B sequences of at most n queries and m keys (the longest).
Problem validate_varlen_forward(ConstTensorView q, ConstTensorView k, ConstTensorView v, const PackedSequences& packed,
                                TensorView out, const AttentionOptions& options, const ForwardExtras& extras,
                                ForwardOutputs& outputs);
Problem validate_varlen_backward(ConstTensorView q, ConstTensorView k, ConstTensorView v, const PackedSequences& packed,
                                 const BackwardIO& io, const AttentionOptions& options, BackwardIO& batched_io);

}  // namespace attnkit::detail
