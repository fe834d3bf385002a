// The scaling experiment, in float64 with plain loops: it is about the mathematics of softmax, not
// about any kernel.
#include "lab/scaling.hpp"

#include <cmath>
#include <span>

#include "lab/gaussian.hpp"
#include "lab/softmax_stats.hpp"

namespace attnkit::lab {

namespace {

// Running sums for one scale choice over the rows of one d_k.
class Accumulator {
 public:
  void add(std::span<const double> logits) {
    for (double s : logits) {
      sum_ += s;
      sum_sq_ += s * s;
    }
    count_ += static_cast<double>(logits.size());
    const SoftmaxStats row = softmax_stats(logits);
    max_weight_ += row.max_weight;
    entropy_ += row.normalized_entropy;
    jacobian_ += row.jacobian_norm;
    saturated_ += row.max_weight >= kSaturatedWeight ? 1 : 0;
    rows_ += 1;
  }

  ScalingStats stats() const {
    const double mean = sum_ / count_;
    return {sum_sq_ / count_ - mean * mean, max_weight_ / rows_, entropy_ / rows_, jacobian_ / rows_, saturated_ / rows_};
  }

 private:
  double sum_ = 0, sum_sq_ = 0, count_ = 0;
  double max_weight_ = 0, entropy_ = 0, jacobian_ = 0, saturated_ = 0, rows_ = 0;
};

// Rows of `dim` entries, each row one vector: x = σ·(√ρ·c + √(1 − ρ)·z), c shared by the row.
void draw_vectors(Gaussian& normal, std::vector<double>& out, int dim, const ScalingConfig& config) {
  const double shared = std::sqrt(config.correlation);
  const double own = std::sqrt(1.0 - config.correlation);
  for (std::size_t row = 0; row < out.size(); row += static_cast<std::size_t>(dim)) {
    const double common = config.correlation > 0 ? normal() : 0.0;
    for (int c = 0; c < dim; ++c) out[row + static_cast<std::size_t>(c)] = config.input_std * (shared * common + own * normal());
  }
}

ScalingRow run_dim(int dim, const ScalingConfig& config, const WorkDone& done) {
  const auto d = static_cast<std::size_t>(dim);
  const auto m = static_cast<std::size_t>(config.keys);
  const auto n = static_cast<std::size_t>(config.queries_per_trial);
  const double inv_sqrt_d = 1.0 / std::sqrt(static_cast<double>(dim));
  Gaussian normal(config.seed, static_cast<std::uint64_t>(dim));
  std::vector<double> q(n * d), k(m * d), logits(m), scaled(m);
  Accumulator unscaled_sums, scaled_sums;

  for (int trial = 0; trial < config.trials; ++trial) {
    draw_vectors(normal, q, dim, config);  // q [n, d]
    draw_vectors(normal, k, dim, config);  // k [m, d]
    for (std::size_t i = 0; i < n; ++i) {
      // logits_j = q_i · k_j, and the same divided by √d_k
      for (std::size_t j = 0; j < m; ++j) {
        double dot = 0;
        for (std::size_t c = 0; c < d; ++c) dot += q[i * d + c] * k[j * d + c];
        logits[j] = dot;
        scaled[j] = dot * inv_sqrt_d;
      }
      unscaled_sums.add(logits);
      scaled_sums.add(scaled);
    }
    if (done) done(static_cast<double>(dim));
  }
  return {dim, unscaled_sums.stats(), scaled_sums.stats()};
}

}  // namespace

// A trial's cost is proportional to d_k (its n·m·d_k products dominate).
double scaling_work(const ScalingConfig& config) {
  double total = 0;
  for (int dim : config.dims) total += static_cast<double>(dim) * config.trials;
  return total;
}

std::vector<ScalingRow> run_scaling(const ScalingConfig& config, const WorkDone& done) {
  std::vector<ScalingRow> rows;
  for (int dim : config.dims) rows.push_back(run_dim(dim, config, done));
  return rows;
}

}  // namespace attnkit::lab
