// The pieces forward and backward share: float64 matrices, the logits in docs/semantics.md's bias order, the
// row softmax and the dropout multipliers. One definition, so the two passes cannot disagree.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "core/problem.hpp"

namespace attnkit::detail {

// A dense row-major float64 matrix.
struct Matrix {
  std::int64_t rows = 0, cols = 0;
  std::vector<double> values;

  Matrix() = default;
  Matrix(std::int64_t r, std::int64_t c) : rows(r), cols(c), values(static_cast<std::size_t>(r * c), 0.0) {}
  double& operator()(std::int64_t i, std::int64_t j) { return values[static_cast<std::size_t>(i * cols + j)]; }
  double operator()(std::int64_t i, std::int64_t j) const { return values[static_cast<std::size_t>(i * cols + j)]; }
};

// The [n, dim] query-side rows (`t` is q or d_out) of batch entry b and query head h: t[b, h, :, :],
// or the packed sequence's rows, followed by zero rows up to n (they see no key).
Matrix gather_queries(const Problem& p, ConstTensorView t, std::int64_t b, std::int64_t h);
// The [m, dim] keys (or values: `t` is p.k or p.v) of batch entry b and KV head g. Over a KV cache
// (p.cached) they are read from the blocks of entry b's sequence; rows past its length stay 0 (they
// are never visible).
Matrix gather_keys(const Problem& p, ConstTensorView t, std::int64_t b, std::int64_t g);
// Writes m into t[b, h, :, :] of a rank-4 view (probs), rounding to t's dtype.
void scatter(const Matrix& m, TensorView t, std::int64_t b, std::int64_t h);
// Writes the entry's own rows of m into a query-side view (out, dq) or a key-side one (dk, dv): the
// inverses of gather_queries and gather_keys.
void scatter_queries(const Problem& p, const Matrix& m, TensorView t, std::int64_t b, std::int64_t h);
void scatter_keys(const Problem& p, const Matrix& m, TensorView t, std::int64_t b, std::int64_t g);

// The logits of one (batch b, query head h), both before and after the bias terms:
//   scaled[i, j] = (q_i · k_j) · scale
//   logits[i, j] = scaled → softcap → + ALiBi → + additive mask → −inf where the key is not visible
struct HeadLogits {
  Matrix scaled;  // kept for the softcap derivative in the backward
  Matrix logits;
};
HeadLogits compute_logits(const Problem& p, std::int64_t b, std::int64_t h, const Matrix& q, const Matrix& k);

// Row softmax of the logits: probs[i, j] = exp(logits[i, j] − lse[i]), with lse[i] = log Σ_j exp(logits[i, j]),
// plus exp(sink) when a sink (an attention sink's logit) is given: it joins every row's sum and has
// no probability of its own. A row whose logits are all −inf has probs = 0 and lse = sink (−inf
// without one). Any NaN logit makes its row NaN.
struct Softmax {
  Matrix probs;
  std::vector<double> lse;
};
Softmax softmax_rows(const Matrix& logits, double sink = -std::numeric_limits<double>::infinity());

// The dropout multiplier of (b, h, i, j): 1/(1 − p) if kept, 0 if dropped; 1 without dropout.
double dropout_multiplier(const Problem& p, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j);

}  // namespace attnkit::detail
