// What one softmax row looks like, for `attnkit lab scaling`: how peaked its weights are and how
// much gradient passes through it, in float64.
#pragma once

#include <span>

namespace attnkit::lab {

struct SoftmaxStats {
  double max_weight = 0;          // max_j p_j, in [1/m, 1]
  double normalized_entropy = 0;  // −Σ p_j·log p_j / log m, in [0, 1]: 1 is uniform, 0 is one-hot
  // ‖J‖_F for the softmax Jacobian J = ∂p/∂s = diag(p) − p·pᵀ. The gradient that reaches the logits
  // is J·(∂L/∂p), so a small ‖J‖ means little of it gets through. In [0, 1/2]: uniform weights give
  // √(m − 1)/m, a one-hot row gives 0.
  double jacobian_norm = 0;
};

// The statistics of p = softmax(logits). logits must be finite and non-empty; m = logits.size()
// (for m = 1 the normalised entropy is taken as 0).
SoftmaxStats softmax_stats(std::span<const double> logits);

}  // namespace attnkit::lab
