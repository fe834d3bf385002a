// The row statistics in closed form, O(m) per row.
#include "lab/softmax_stats.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace attnkit::lab {

SoftmaxStats softmax_stats(std::span<const double> logits) {
  const auto top = static_cast<std::size_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  const double max_logit = logits[top];
  // rest = Σ_{j≠top} e^(s_j − max): kept apart from the top's e^0 = 1, because 1 − p_top = rest / sum
  // is the small number a nearly one-hot row's Jacobian is made of, and 1 − p_top would round it away.
  double rest = 0;
  for (std::size_t j = 0; j < logits.size(); ++j) {
    if (j != top) rest += std::exp(logits[j] - max_logit);
  }
  const double sum = 1 + rest;
  const double lse = max_logit + std::log1p(rest);
  const double p_top = 1 / sum;

  // log p_j = s_j − lse stays finite where p_j underflows to 0, so the entropy needs no 0·log 0 case.
  double entropy = 0, others_sq = 0;
  for (std::size_t j = 0; j < logits.size(); ++j) {
    const double log_p = logits[j] - lse;
    const double p = std::exp(log_p);
    entropy -= p * log_p;
    if (j != top) others_sq += p * p;
  }
  const double sum_sq = p_top * p_top + others_sq;
  // ‖diag(p) − p·pᵀ‖_F² = Σ_j p_j²·(1 − p_j)² + Σ_j p_j²·(Σp² − p_j²): every term is ≥ 0, and the two
  // that would cancel for the top key are taken from the other keys' sums instead.
  const double top_gap = rest / sum;  // 1 − p_top
  double jacobian_sq = p_top * p_top * (top_gap * top_gap + others_sq);
  for (std::size_t j = 0; j < logits.size(); ++j) {
    if (j == top) continue;
    const double p = std::exp(logits[j] - lse);
    jacobian_sq += p * p * ((1 - p) * (1 - p) + (sum_sq - p * p));
  }

  SoftmaxStats stats;
  stats.max_weight = p_top;
  stats.normalized_entropy = logits.size() > 1 ? entropy / std::log(static_cast<double>(logits.size())) : 0.0;
  stats.jacobian_norm = std::sqrt(jacobian_sq);
  return stats;
}

}  // namespace attnkit::lab
