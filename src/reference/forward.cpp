// Reference forward: O = dropout(softmax(logits)) · V, one (batch, query head) at a time.
#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "core/parallel_for.hpp"
#include "reference/logits.hpp"
#include "reference/reference.hpp"

namespace attnkit::detail {
namespace {

// One (batch, query head)'s results, kept in float64 until every head has its own.
struct HeadOutputs {
  Matrix out;               // [n, d_v]
  std::vector<double> lse;  // [n]
  Matrix probs;             // [n, m], when requested
};

HeadOutputs forward_head(const Problem& p, bool want_probs, std::int64_t b, std::int64_t h) {
  const Sizes& s = p.sizes;
  const std::int64_t g = s.kv_head_of(h);
  const Matrix q = gather_queries(p, p.q, b, h);  // [n, d_k]
  const Matrix k = gather_keys(p, p.k, b, g);  // [m, d_k]
  const Matrix v = gather_keys(p, p.v, b, g);  // [m, d_v]

  // 1. logits[i, j] = bias(q_i · k_j · scale), −inf where masked           [n, m]
  const HeadLogits logits = compute_logits(p, b, h, q, k);
  // 2. P = softmax(logits) per row; lse[i] = log Σ_j exp(logits[i, j])     [n, m], [n]
  //    (+ exp(sinks[h]) in the sum with attention sinks)
  const double sink = p.sinks.empty() ? -std::numeric_limits<double>::infinity() : p.sinks[static_cast<std::size_t>(h)];
  Softmax softmax = softmax_rows(logits.logits, sink);
  // 3. O[i, :] = Σ_j P[i, j] · dropout(b, h, i, j) · V[j, :] over visible keys  [n, d_v]
  Matrix o(s.n, s.d_v);
  for (std::int64_t i = 0; i < s.n; ++i) {
    for (std::int64_t j = 0; j < s.m; ++j) {
      if (logits.logits(i, j) == -std::numeric_limits<double>::infinity()) continue;  // masked: contributes nothing
      const double weight = softmax.probs(i, j) * dropout_multiplier(p, b, h, i, j);
      for (std::int64_t c = 0; c < s.d_v; ++c) o(i, c) += weight * v(j, c);
    }
  }
  return {std::move(o), std::move(softmax.lse), want_probs ? std::move(softmax.probs) : Matrix()};
}

// The float32 LSE of a row: −inf only for a row with no visible key. A row that sees keys but whose
// log-sum-exp lies below float32's range stores its most negative finite value instead (and one
// above it +inf, where rounding takes it): −inf keeps its one meaning (docs/semantics.md, Limits).
float lse_as_float(double lse) {
  constexpr double kLowest = std::numeric_limits<float>::lowest();
  if (lse != -std::numeric_limits<double>::infinity() && lse < kLowest) return std::numeric_limits<float>::lowest();
  return lse > static_cast<double>(std::numeric_limits<float>::max()) ? INFINITY : static_cast<float>(lse);
}

void write_head(const Problem& p, const HeadOutputs& head, const ForwardOutputs& outputs, std::int64_t b, std::int64_t h) {
  scatter_queries(p, head.out, outputs.out, b, h);
  if (outputs.lse) {
    for (std::int64_t i = 0; i < p.query_count(b); ++i) {
      const StoredRow at = query_row(p, b, i);
      *outputs.lse->at<float>({at.outer, h, at.row}) = lse_as_float(head.lse[static_cast<std::size_t>(i)]);
    }
  }
  if (outputs.probs) scatter(head.probs, *outputs.probs, b, h);
}

}  // namespace

ByteCount reference_scratch_bytes(const Problem& p, bool probs) {
  const Sizes& s = p.sizes;
  const ByteCount n = ByteCount::of(s.n), m = ByteCount::of(s.m), d = ByteCount::of(s.d_k) + ByteCount::of(s.d_v) + 1;
  // Per (batch, head) in flight: scaled logits, logits and probabilities [n, m]; Q, dO, dQ [n, d];
  // K, V, dK, dV and one row of dP [m, d] (the backward's share, an upper bound for the forward's).
  const ByteCount per_head = (3 * n * m + 2 * n * d + 2 * m * d) * sizeof(double);
  const ByteCount heads = ByteCount::of(s.batch) * ByteCount::of(s.q_heads);
  // Every head's results, held until all are computed: out and lse, or dQ (≤ n·d), and the KV
  // heads' dK and dV (≤ m·d per query head); the probabilities when asked for.
  const ByteCount results = heads * (n * d + m * d + (probs ? n * m : 0)) * sizeof(double);
  return results + per_head * std::min<std::uint64_t>(heads.value(), static_cast<std::uint64_t>(num_threads()));
}

void reference_forward(const Problem& p, const ForwardOutputs& outputs) {
  const Sizes& s = p.sizes;
  const std::int64_t heads = s.batch * s.q_heads;
  // All heads are computed before the first is written: if memory runs out, no output has changed.
  std::vector<HeadOutputs> results(static_cast<std::size_t>(heads));
  parallel_loops(nullptr, {{heads, [&](std::int64_t t) {
                              results[static_cast<std::size_t>(t)] = forward_head(p, outputs.probs.has_value(), t / s.q_heads, t % s.q_heads);
                            }},
                           {heads, [&](std::int64_t t) {
                              write_head(p, results[static_cast<std::size_t>(t)], outputs, t / s.q_heads, t % s.q_heads);
                            }}});
}

}  // namespace attnkit::detail
