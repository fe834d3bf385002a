#include "reference/logits.hpp"

#include <cmath>
#include <cstdlib>
#include <limits>

#include "attnkit/quantized.hpp"
#include "core/philox.hpp"

namespace attnkit::detail {
namespace {

constexpr double kMinusInf = -std::numeric_limits<double>::infinity();

const std::byte* element(ConstTensorView t, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) {
  const std::int64_t offset = b * t.stride(0) + h * t.stride(1) + i * t.stride(2) + j * t.stride(3);
  return static_cast<const std::byte*>(t.data()) + offset * static_cast<std::int64_t>(dtype_size(t.dtype()));
}

// Whether key j may be seen by query i at all: the entry's keys, causal, window, key lengths and a
// boolean keep-mask.
bool key_visible(const Problem& p, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) {
  if (i >= p.query_count(b) || j >= p.key_count(b)) return false;
  const std::int64_t pos = p.aligned_position(b, i);  // i' (core/problem.hpp)
  if (p.causal != Causal::none && j > pos) return false;
  // i' − left ≤ j ≤ i' + right, written as distances so that no side up to INT64_MAX overflows
  if (p.window.left >= 0 && pos - j > p.window.left) return false;
  if (p.window.right >= 0 && j - pos > p.window.right) return false;
  if (!p.key_lengths.empty() && j >= p.key_lengths[static_cast<std::size_t>(b)]) return false;
  if (p.mask_kind == MaskKind::keep && load_as_double(element(p.mask, b, h, i, j), DType::boolean) == 0.0) return false;
  return true;
}

}  // namespace

Matrix gather_queries(const Problem& p, ConstTensorView t, std::int64_t b, std::int64_t h) {
  Matrix m(p.sizes.n, t.size(3));
  for (std::int64_t i = 0; i < p.query_count(b); ++i) {
    const StoredRow at = query_row(p, b, i);  // t[b, h, i], or its row of the packed queries
    for (std::int64_t c = 0; c < m.cols; ++c) m(i, c) = load_as_double(element(t, at.outer, h, at.row, c), t.dtype());
  }
  return m;
}

Matrix gather_keys(const Problem& p, ConstTensorView t, std::int64_t b, std::int64_t g) {
  Matrix m(p.sizes.m, t.size(3));
  for (std::int64_t j = 0; j < p.key_count(b); ++j) {
    const StoredRow at = stored_row(p, b, j);  // t[b, g, j], or its row of a KV cache's block
    // A key in a group quantised per channel (a KV cache's key pool, never its value pool).
    if (j < grouped_keys(p, b) && t.data() == p.k.data()) {
      const std::byte* rows[kChannelGroup];
      channel_group_rows(p, b, g, j - j % kChannelGroup, rows);
      dequantize_channel_group_row(rows, j % kChannelGroup, m.cols, t.dtype(), 0, m.cols, &m(j, 0));
      continue;
    }
    if (is_quantized(t.dtype())) {  // a quantized cache's row record: its stored values exactly
      dequantize_row(element(t, at.outer, g, at.row, 0), m.cols, t.dtype(), 0, m.cols, &m(j, 0));
      continue;
    }
    for (std::int64_t col = 0; col < m.cols; ++col) m(j, col) = load_as_double(element(t, at.outer, g, at.row, col), t.dtype());
  }
  return m;
}

void scatter(const Matrix& m, TensorView t, std::int64_t b, std::int64_t h) {
  for (std::int64_t i = 0; i < m.rows; ++i)
    for (std::int64_t c = 0; c < m.cols; ++c)
      store_from_double(const_cast<std::byte*>(element(t, b, h, i, c)), t.dtype(), m(i, c));
}

void scatter_queries(const Problem& p, const Matrix& m, TensorView t, std::int64_t b, std::int64_t h) {
  for (std::int64_t i = 0; i < p.query_count(b); ++i) {
    const StoredRow at = query_row(p, b, i);
    for (std::int64_t c = 0; c < m.cols; ++c)
      store_from_double(const_cast<std::byte*>(element(t, at.outer, h, at.row, c)), t.dtype(), m(i, c));
  }
}

void scatter_keys(const Problem& p, const Matrix& m, TensorView t, std::int64_t b, std::int64_t g) {
  for (std::int64_t j = 0; j < p.key_count(b); ++j) {
    const StoredRow at = stored_row(p, b, j);
    for (std::int64_t c = 0; c < m.cols; ++c)
      store_from_double(const_cast<std::byte*>(element(t, at.outer, g, at.row, c)), t.dtype(), m(j, c));
  }
}

HeadLogits compute_logits(const Problem& p, std::int64_t b, std::int64_t h, const Matrix& q, const Matrix& k) {
  const std::int64_t n = p.sizes.n, m = p.sizes.m;
  HeadLogits out{Matrix(n, m), Matrix(n, m)};
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t j = 0; j < m; ++j) {
      double dot = 0.0;
      for (std::int64_t c = 0; c < q.cols; ++c) dot += q(i, c) * k(j, c);
      // s = q·k · scale
      double s = dot * p.scale;
      out.scaled(i, j) = s;
      // s = c · tanh(s / c)
      if (p.softcap > 0) s = p.softcap * std::tanh(s / p.softcap);
      // s = s − slope_h · |i' − j|
      if (!p.alibi_slopes.empty()) {
        const double distance = static_cast<double>(std::llabs(p.aligned_position(b, i) - j));
        s -= static_cast<double>(p.alibi_slopes[static_cast<std::size_t>(h)]) * distance;
      }
      // s = s + mask[b, h, i, j]; an additive −inf masks the key outright, even when q·k is NaN
      if (p.mask_kind == MaskKind::additive) {
        const double bias = load_as_double(element(p.mask, b, h, i, j), p.mask.dtype());
        s = bias == kMinusInf ? kMinusInf : s + bias;
      }
      // s = −inf where the key is not visible
      if (!key_visible(p, b, h, i, j)) s = kMinusInf;
      out.logits(i, j) = s;
    }
  }
  return out;
}

Softmax softmax_rows(const Matrix& logits, double sink) {
  Softmax out{Matrix(logits.rows, logits.cols), std::vector<double>(static_cast<std::size_t>(logits.rows))};
  for (std::int64_t i = 0; i < logits.rows; ++i) {
    // Row maximum, NaN-propagating: a NaN logit must poison the row, not be skipped by a comparison.
    // The sink is one more logit of the row.
    double row_max = sink;
    for (std::int64_t j = 0; j < logits.cols; ++j) {
      const double z = logits(i, j);
      if (std::isnan(z) || z > row_max) row_max = z;
      if (std::isnan(z)) break;
    }
    double& lse = out.lse[static_cast<std::size_t>(i)];
    if (row_max == kMinusInf) {  // no visible key: probabilities stay 0
      lse = kMinusInf;
      continue;
    }
    double sum = sink == kMinusInf ? 0.0 : std::exp(sink - row_max);
    for (std::int64_t j = 0; j < logits.cols; ++j) sum += std::exp(logits(i, j) - row_max);
    lse = row_max + std::log(sum);
    for (std::int64_t j = 0; j < logits.cols; ++j) out.probs(i, j) = std::exp(logits(i, j) - row_max) / sum;
  }
  return out;
}

double dropout_multiplier(const Problem& p, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) {
  if (p.dropout_p == 0) return 1.0;
  return dropout_keeps(p.seed, p.dropout_p, b, h, i, j) ? 1.0 / (1.0 - p.dropout_p) : 0.0;
}

}  // namespace attnkit::detail
