// Reference backward: the forward's passes in reverse, in float64, recomputing the forward per head.
// dk and dv of a KV head sum over its query heads in increasing order, so results are deterministic.
#include <cmath>
#include <limits>
#include <vector>

#include "core/parallel_for.hpp"
#include "reference/logits.hpp"
#include "reference/reference.hpp"

namespace attnkit::detail {
namespace {

constexpr double kMinusInf = -std::numeric_limits<double>::infinity();

// Adds query head h's contribution to dk and dv (of its KV head), and to d_sink that of its sink
// (when it has one), and returns dq of head h.
Matrix backward_head(const Problem& p, const BackwardIO& io, std::int64_t b, std::int64_t h, const Matrix& k,
                     const Matrix& v, Matrix& dk, Matrix& dv, double& d_sink) {
  const Sizes& s = p.sizes;
  const double softcap = p.softcap;
  const Matrix q = gather_queries(p, p.q, b, h);          // [n, d_k]
  const Matrix d_out = gather_queries(p, io.d_out, b, h);  // [n, d_v]

  // Recompute the forward: logits, P, and the dropout multipliers.
  const HeadLogits logits = compute_logits(p, b, h, q, k);
  const double sink = p.sinks.empty() ? kMinusInf : p.sinks[static_cast<std::size_t>(h)];
  const Softmax softmax = softmax_rows(logits.logits, sink);
  const Matrix& P = softmax.probs;

  Matrix dq(s.n, s.d_k);
  for (std::int64_t i = 0; i < s.n; ++i) {
    if (softmax.lse[static_cast<std::size_t>(i)] == kMinusInf) continue;  // no visible key: zero gradients
    // dP[i, j] = (dO_i · V_j) · dropout(i, j)       from O_i = Σ_j P[i, j] · dropout(i, j) · V_j
    // dV_j    += P[i, j] · dropout(i, j) · dO_i     from the same line
    std::vector<double> dP(static_cast<std::size_t>(s.m), 0.0);
    double row_dot = 0.0;  // D_i = Σ_j P[i, j] · dP[i, j]
    for (std::int64_t j = 0; j < s.m; ++j) {
      if (logits.logits(i, j) == kMinusInf) continue;
      const double multiplier = dropout_multiplier(p, b, h, i, j);
      double dot = 0.0;
      for (std::int64_t c = 0; c < s.d_v; ++c) {
        dot += d_out(i, c) * v(j, c);
        dv(j, c) += P(i, j) * multiplier * d_out(i, c);
      }
      dP[static_cast<std::size_t>(j)] = dot * multiplier;
      row_dot += P(i, j) * dP[static_cast<std::size_t>(j)];
    }
    // dsink = −p_sink · D                         from P[i, j] = e^(logits − lse), lse counting the sink
    if (sink != kMinusInf) d_sink -= std::exp(sink - softmax.lse[static_cast<std::size_t>(i)]) * row_dot;
    for (std::int64_t j = 0; j < s.m; ++j) {
      if (logits.logits(i, j) == kMinusInf) continue;
      // dlogits = P ∘ (dP − D)                       from P = softmax(logits)
      double ds = P(i, j) * (dP[static_cast<std::size_t>(j)] - row_dot);
      // ALiBi and the additive mask are constants: d(scaled-and-capped) = dlogits.
      // dscaled = dcapped · (1 − tanh²(s / c))       from capped = c · tanh(s / c)
      if (softcap > 0) {
        const double t = std::tanh(logits.scaled(i, j) / softcap);
        ds *= 1.0 - t * t;
      }
      // dq_i += ds · scale · k_j ;  dk_j += ds · scale · q_i     from scaled = (q_i · k_j) · scale
      for (std::int64_t c = 0; c < s.d_k; ++c) {
        dq(i, c) += ds * p.scale * k(j, c);
        dk(j, c) += ds * p.scale * q(i, c);
      }
    }
  }
  return dq;
}

// One (batch, KV head)'s gradients: dK and dV, and dQ of each of its query heads.
struct KvHeadGradients {
  Matrix dk, dv;
  std::vector<Matrix> dq;       // one per query head of the group, in order
  std::vector<double> d_sinks;  // the same heads' sinks, this batch entry's share
};

KvHeadGradients backward_kv_head(const Problem& p, const BackwardIO& io, std::int64_t b, std::int64_t g) {
  const Sizes& s = p.sizes;
  KvHeadGradients grads{Matrix(s.m, s.d_k), Matrix(s.m, s.d_v), {}, {}};
  if (s.q_heads == 0) return grads;  // no query heads: nothing depends on k or v
  const Matrix k = gather_keys(p, p.k, b, g);  // [m, d_k]
  const Matrix v = gather_keys(p, p.v, b, g);  // [m, d_v]
  for (std::int64_t h = g * s.group(); h < (g + 1) * s.group(); ++h) {
    grads.d_sinks.push_back(0.0);
    grads.dq.push_back(backward_head(p, io, b, h, k, v, grads.dk, grads.dv, grads.d_sinks.back()));
  }
  return grads;
}

void write_kv_head(const KvHeadGradients& grads, const Problem& p, const BackwardIO& io, std::int64_t b, std::int64_t g) {
  for (std::size_t i = 0; i < grads.dq.size(); ++i) {
    scatter_queries(p, grads.dq[i], io.dq, b, g * p.sizes.group() + static_cast<std::int64_t>(i));
  }
  scatter_keys(p, grads.dk, io.dk, b, g);
  scatter_keys(p, grads.dv, io.dv, b, g);
}

}  // namespace

void reference_backward(const Problem& p, const BackwardIO& io) {
  const std::int64_t kv_heads = p.k.size(1);
  const std::int64_t count = p.sizes.batch * kv_heads;
  // All gradients are computed before the first is written: if memory runs out, none has changed.
  std::vector<KvHeadGradients> results(static_cast<std::size_t>(count));
  parallel_loops(nullptr, {{count, [&](std::int64_t t) {
                              results[static_cast<std::size_t>(t)] = backward_kv_head(p, io, t / kv_heads, t % kv_heads);
                            }},
                           {count, [&](std::int64_t t) {
                              write_kv_head(results[static_cast<std::size_t>(t)], p, io, t / kv_heads, t % kv_heads);
                            }}});
  if (!io.d_sinks) return;
  // Each sink's gradient sums its head's share of every batch entry, in batch order.
  const std::int64_t group = p.sizes.group();
  for (std::int64_t h = 0; h < p.sizes.q_heads; ++h) {
    double total = 0.0;
    for (std::int64_t b = 0; b < p.sizes.batch && kv_heads > 0; ++b) {
      total += results[static_cast<std::size_t>(b * kv_heads + h / group)].d_sinks[static_cast<std::size_t>(h % group)];
    }
    *io.d_sinks->at<float>({h}) = static_cast<float>(total);
  }
}

}  // namespace attnkit::detail
