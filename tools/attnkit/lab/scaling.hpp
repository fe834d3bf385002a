// `attnkit lab scaling`: what the 1/√d_k factor does to softmax attention. For each d_k, random
// queries and keys (entries N(0, σ²), optionally equicorrelated within a vector), the logits q·k
// with and without the factor, and four figures of the resulting softmax rows.
#pragma once

#include <cstdint>
#include <vector>

#include "lab/work_done.hpp"

namespace attnkit::lab {

struct ScalingConfig {
  std::vector<int> dims = {2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};  // d_k values
  int keys = 128;                // m keys per softmax row
  int queries_per_trial = 16;    // rows per trial; they share the trial's keys
  int trials = 200;              // independent draws of Q [queries, d_k] and K [keys, d_k] per d_k
  std::uint64_t seed = 1;
  double input_std = 1.0;        // σ of every entry of Q and K
  // Correlation ρ between any two entries of one query or key vector (each entry stays N(0, σ²)):
  // x = σ·(√ρ·c + √(1 − ρ)·z) with c shared by the vector. 0 is the i.i.d. case the factor assumes.
  double correlation = 0.0;
};

// Averages over every row (trials × queries_per_trial) of one d_k, for one choice of scale.
struct ScalingStats {
  double logit_variance = 0;  // pooled variance of every logit of every row
  double max_weight = 0;      // mean of max_j p_j
  double entropy = 0;         // mean of −Σ p_j·log p_j / log m
  double jacobian_norm = 0;   // mean of ‖diag(p) − p·pᵀ‖_F (lab/softmax_stats.hpp)
  double saturated = 0;       // fraction of rows with max_j p_j >= kSaturatedWeight
};

// A row this peaked passes almost no gradient: with ε = 1 − max_j p_j, ‖J‖_F² <= 4ε² + ε⁴, so
// ‖J‖_F <= 0.02 there (uniform weights over 128 keys give 0.088).
inline constexpr double kSaturatedWeight = 0.99;

struct ScalingRow {
  int d_k = 0;
  ScalingStats unscaled;  // logits q·k
  ScalingStats scaled;    // logits q·k / √d_k (the same draws)
};

// The total units `done` is called with, summed over the run (a trial of d_k counts d_k).
double scaling_work(const ScalingConfig& config);
// One row per config.dims entry, in order. Reproducible: each d_k draws from its own stream of
// (seed, d_k), so its row is the same whatever other dims are asked for.
std::vector<ScalingRow> run_scaling(const ScalingConfig& config, const WorkDone& done = {});

}  // namespace attnkit::lab
