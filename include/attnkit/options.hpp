/// \file
/// What an attention call computes, beyond Q, K and V.
///
/// The logits of query i against key j are built in this fixed order (docs/semantics.md):
/// \code{.unparsed}
///   s = (q_i · k_j) · scale                      scale defaults to 1/sqrt(d_k)
///   s = softcap · tanh(s / softcap)              if softcap > 0
///   s = s − alibi_slopes[h] · |i' − j|           if ALiBi slopes are given
///   s = s + mask[b, h, i, j]                     if the mask is an additive (floating) mask
///   s = −inf where the key is not visible        boolean mask false, causal, window, key_lengths
/// \endcode
/// where i' is the aligned query position: i + (m − n) under Causal::bottom_right, i otherwise.
/// A key whose final logit is −inf is masked: it contributes nothing, not even through NaN values.
/// An additive −inf masks outright: the logit is −inf even when q·k is NaN.
/// With `sinks`, row i of head h is softmax over its logits and one more, sinks[h], whose value row
/// is zero: exp(sinks[h] − max) joins the denominator only (learned attention sinks, as gpt-oss).
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "attnkit/tensor.hpp"

namespace attnkit {

/// Causal masking of query i (of n) against key j (of m).
enum class Causal : std::uint8_t {
  none,          ///< every key is visible (other masks aside)
  top_left,      ///< key j visible when j <= i             (PyTorch is_causal)
  bottom_right,  ///< key j visible when j <= i + (m − n)   (FlashAttention >= 2.1, KV-cache decoding)
};

/// Which implementation runs. `automatic` picks the fastest available for the request.
enum class Kernel : std::uint8_t { automatic, reference, fast };
/// \var Kernel::automatic
/// The fast kernel for f32, f16 and bf16; the float64 reference for f64 (see resolve_kernel).
/// \var Kernel::reference
/// The float64 reference: any floating dtype, computed in double.
/// \var Kernel::fast
/// The SIMD kernel (see attnkit/targets.hpp): f32, f16 and bf16; f64 raises Error(unsupported).

/// Sliding window around the aligned query position i': keys i' − left <= j <= i' + right are kept.
/// −1 means unbounded on that side.
struct Window {
  std::int64_t left = -1;   ///< keys j >= i' − left are kept; −1: unbounded
  std::int64_t right = -1;  ///< keys j <= i' + right are kept; −1: unbounded
};

/// Everything an attention call computes beyond Q, K and V; the defaults give plain softmax
/// attention with scale 1/sqrt(d_k).
/// Options reference caller memory (mask, key_lengths, alibi_slopes, sinks) without copying it; keep that
/// memory alive for the duration of the call.
struct AttentionOptions {
  std::optional<double> scale;          ///< default 1/sqrt(d_k); must be finite and > 0
  Causal causal = Causal::none;         ///< causal masking and its alignment
  Window window;                        ///< sliding window; default unbounded on both sides
  /// Boolean keep-mask (true = attend) or floating additive bias, rank 2 [n, m] or rank 4
  /// [B|1, Hq|1, n|1, m|1]; size-1 dimensions (or zero strides) broadcast.
  std::optional<ConstTensorView> mask;
  std::span<const std::int64_t> key_lengths;  ///< empty = all m keys; else one per batch, 0..m
  std::span<const float> alibi_slopes;        ///< empty = none; else one finite slope per query head
  double softcap = 0.0;                       ///< 0 = off; else > 0 and finite
  /// empty = none; else one finite logit per query head, in the denominator of each row's softmax
  /// (and its LSE) but weighting no value: a row then sums to less than 1, and a row that sees no
  /// key gives zeros with LSE = sinks[h]. backward() writes their gradient when asked
  /// (BackwardExtras::d_sinks); ring attention refuses them.
  std::span<const float> sinks;
  double dropout_p = 0.0;                     ///< in [0, 1); kept weights are scaled by 1/(1 − p)
  std::uint64_t seed = 0;                     ///< dropout stream; same seed, same kept elements
  Kernel kernel = Kernel::automatic;          ///< which implementation runs
};

}  // namespace attnkit
