/// \file
/// Attention over packed variable-length batches (FlashAttention's varlen layout).
///
/// B sequences of different lengths travel in one call, without padding: their queries are stacked
/// along the first dimension of q, their keys and values along that of k and v, and two offset
/// tables say where each sequence starts (the last entry is the total):
/// \code{.unparsed}
///   q    [total_q, Hq,  d_k]      k [total_k, Hkv, d_k]      v [total_k, Hkv, d_v]
///   out  [total_q, Hq,  d_v]      lse [Hq, total_q] (f32)    probs [B, Hq, max_n, max_m]
///   cu_seqlens_q [B + 1], cu_seqlens_k [B + 1]   i32 or i64, from 0, non-decreasing, ending at the total
/// \endcode
/// Sequence b's queries are rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1] − 1 of q; they attend only
/// to the keys cu_seqlens_k[b] .. cu_seqlens_k[b + 1] − 1, never across sequences. A sequence may be
/// empty on either side: no queries (nothing is written for it) or no keys (its rows follow the
/// empty-row rule of attention.hpp: out = 0, lse = −inf).
///
/// Every option applies per sequence, in the sequence's own positions (i and j from 0), exactly as
/// in a call on that sequence alone:
/// \code{.unparsed}
///   causal       Causal::bottom_right aligns each sequence's last query with its own last key
///                (FlashAttention), Causal::top_left its first query with its first key.
///   window, ALiBi slopes (per query head), softcap, scale: as in options.hpp.
///   mask         one per sequence, padded: rank 4 [B|1, Hq|1, max_n|1, max_m|1] or rank 2
///                [max_n|1, max_m|1], indexed by (sequence, head, i, j); entries past a sequence's
///                own lengths are never read. max_n and max_m are the longest sequence's lengths.
///   dropout      element (b, h, i, j) is kept or dropped as in a batched call's entry b: each
///                sequence's stream depends on the seed, its index b and its own positions, never on
///                what else is packed with it.
///   key_lengths  not taken: cu_seqlens_k gives each sequence its keys.
/// \endcode
/// probs are padded like the mask; entries past a sequence's lengths are 0.
///
/// Guarantees as in attention.hpp: every element of every output is written, bad input raises
/// attnkit::Error naming the argument (for offsets, the offending index) and nothing is written. With
/// the same kernel, target and thread count, each sequence's out, lse and gradients are bitwise those
/// of a call (forward / backward) on that sequence alone, with the same options and batch index.
#pragma once

#include "attnkit/attention.hpp"

namespace attnkit {

/// Where the sequences of a packed batch start: [B + 1] offsets of i32 or i64, rank 1.
struct SequenceOffsets {
  ConstTensorView queries;  ///< cu_seqlens_q: sequence b's queries are rows queries[b] .. queries[b + 1] − 1
  ConstTensorView keys;     ///< cu_seqlens_k: sequence b's keys are rows keys[b] .. keys[b + 1] − 1
};

/// out = attention of each sequence on its own (layout described for this file); lse and probs as
/// asked in extras.
void varlen_forward(ConstTensorView q, ConstTensorView k, ConstTensorView v, const SequenceOffsets& offsets,
                    TensorView out, const AttentionOptions& options = {}, const ForwardExtras& extras = {});

/// Gradients of each sequence, as backward() (attention.hpp) computes them; dq, dk and dv take the
/// packed shapes of q, k and v, and lse the [Hq, total_q] the forward returned; extras.d_sinks [Hq]
/// sums over every sequence.
void varlen_backward(ConstTensorView q, ConstTensorView k, ConstTensorView v, const SequenceOffsets& offsets,
                     ConstTensorView out, ConstTensorView d_out, ConstTensorView lse, TensorView dq, TensorView dk,
                     TensorView dv, const AttentionOptions& options = {}, const BackwardExtras& extras = {});

}  // namespace attnkit
