// `attnkit lab`: the experiments' figures against what the mathematics says they must be (with
// bounds derived below), their reproducibility, and the command's output and usage errors.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "cli/cli_runner.hpp"
#include "lab/precision.hpp"
#include "lab/scaling.hpp"
#include "lab/softmax_stats.hpp"
#include "support/testing.hpp"
#include "attnkit_viz/picture_file.hpp"

namespace {

using attnkit::lab::ScalingConfig;
using attnkit::lab::ScalingRow;
using attnkit::testing::run_cli;

constexpr int kOk = 0, kUsage = 2;

// ---- one softmax row ----

// ‖diag(p) − p·pᵀ‖_F by building the matrix, in long double: the definition, to check the closed
// form. (Its diagonal p − p² loses digits for a nearly one-hot row; long double keeps 11 more.)
double jacobian_norm_by_matrix(const std::vector<double>& logits) {
  long double max_logit = logits[0], sum = 0;
  for (double s : logits) max_logit = std::max<long double>(max_logit, s);
  std::vector<long double> p;
  for (double s : logits) p.push_back(std::exp(s - max_logit)), sum += p.back();
  for (long double& x : p) x /= sum;
  long double squares = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    for (std::size_t j = 0; j < p.size(); ++j) {
      const long double entry = (i == j ? p[i] : 0.0L) - p[i] * p[j];
      squares += entry * entry;
    }
  }
  return static_cast<double>(std::sqrt(squares));
}

TEST(SoftmaxStats, UniformAndOneHotRows) {
  const std::vector<double> equal(128, 3.0);
  const auto uniform = attnkit::lab::softmax_stats(equal);
  EXPECT_NEAR(uniform.max_weight, 1.0 / 128, 1e-15);
  EXPECT_NEAR(uniform.normalized_entropy, 1.0, 1e-12);
  EXPECT_NEAR(uniform.jacobian_norm, std::sqrt(127.0) / 128, 1e-12);

  std::vector<double> peaked(128, 0.0);
  peaked[17] = 1000;  // every other weight underflows to 0
  const auto one_hot = attnkit::lab::softmax_stats(peaked);
  EXPECT_EQ(one_hot.max_weight, 1.0);
  EXPECT_NEAR(one_hot.normalized_entropy, 0.0, 1e-12);
  EXPECT_NEAR(one_hot.jacobian_norm, 0.0, 1e-12);

  // Two equal winners: the largest ‖J‖_F any row can have, 1/2.
  peaked[3] = 1000;
  EXPECT_NEAR(attnkit::lab::softmax_stats(peaked).jacobian_norm, 0.5, 1e-12);
}

TEST(SoftmaxStats, MatchesTheDefinitionsOnRandomRows) {
  ATTNKIT_TRACE_SEED();
  attnkit::testing::Rng rng(71);
  for (double spread : {0.1, 1.0, 5.0, 30.0}) {
    for (int m : {2, 7, 64}) {
      std::vector<double> logits;
      for (int j = 0; j < m; ++j) logits.push_back(spread * rng.normal());
      const auto stats = attnkit::lab::softmax_stats(logits);
      SCOPED_TRACE("spread " + std::to_string(spread) + ", m " + std::to_string(m));
      // Relative accuracy even for nearly one-hot rows, where ‖J‖_F is tiny (spread 30).
      const double expected = jacobian_norm_by_matrix(logits);
      EXPECT_NEAR(stats.jacobian_norm, expected, 1e-9 * expected + 1e-18);
      EXPECT_GE(stats.max_weight, 1.0 / m - 1e-15);
      EXPECT_LE(stats.max_weight, 1.0);
      EXPECT_GE(stats.normalized_entropy, -1e-12);
      EXPECT_LE(stats.normalized_entropy, 1.0 + 1e-12);
      EXPECT_GE(stats.jacobian_norm, 0.0);
      EXPECT_LE(stats.jacobian_norm, 0.5);
    }
  }
}

// ---- the scaling experiment ----

ScalingConfig small_config(std::uint64_t seed) {
  ScalingConfig c;
  c.keys = 64;
  c.queries_per_trial = 16;
  c.trials = 20;
  c.seed = seed;
  return c;
}

TEST(LabScaling, SameSeedSameNumbersAndEachDimHasItsOwnStream) {
  const ScalingConfig c = small_config(5);
  const std::vector<ScalingRow> a = attnkit::lab::run_scaling(c), b = attnkit::lab::run_scaling(c);
  ASSERT_EQ(a.size(), c.dims.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].d_k, c.dims[i]);
    EXPECT_EQ(a[i].unscaled.logit_variance, b[i].unscaled.logit_variance);
    EXPECT_EQ(a[i].scaled.jacobian_norm, b[i].scaled.jacobian_norm);
  }
  ScalingConfig one = c;
  one.dims = {64};  // the d_k = 64 row must not depend on the others being run
  EXPECT_EQ(attnkit::lab::run_scaling(one)[0].unscaled.max_weight, a[5].unscaled.max_weight);
  ScalingConfig other = c;
  other.seed = 6;
  EXPECT_NE(attnkit::lab::run_scaling(other)[5].unscaled.max_weight, a[5].unscaled.max_weight);
}

// With q, k ∈ R^d i.i.d. N(0, 1) and s = q·k: E[s²] = d, Var(s²) = 2d² + 6d, and two logits that
// share q (or k) have Cov(s², s'²) = E|q|⁴ − d² = 2d. A trial's mean A of its n·m squared logits
// therefore has Var(A) = (2d² + 2d(m + n + 1)) / (n·m), and over T independent trials the estimate
// of the variance, divided by d, has standard deviation
//   σ = sqrt((2 + 2(m + n + 1)/d) / (n·m·T)).
// The scaled logits are the same logits divided by √d, so their variance estimate is the same
// number divided by d. The test allows 5σ (the pooled mean's square, O(1/(n·m·T)), is far smaller).
TEST(LabScaling, LogitVarianceIsDkUnscaledAndOneScaled) {
  ATTNKIT_TRACE_SEED();
  const ScalingConfig c = small_config(attnkit::testing::test_seed());
  for (const ScalingRow& r : attnkit::lab::run_scaling(c)) {
    const double d = r.d_k, n = c.queries_per_trial, m = c.keys;
    const double sigma = std::sqrt((2 + 2 * (m + n + 1) / d) / (n * m * c.trials));
    SCOPED_TRACE("d_k " + std::to_string(r.d_k) + ", 5 sigma = " + std::to_string(5 * sigma));
    EXPECT_NEAR(r.unscaled.logit_variance / d, 1.0, 5 * sigma);
    EXPECT_NEAR(r.scaled.logit_variance, 1.0, 5 * sigma);
  }
}

TEST(LabScaling, FiguresStayInTheirRanges) {
  ATTNKIT_TRACE_SEED();
  const ScalingConfig c = small_config(attnkit::testing::test_seed());
  for (const ScalingRow& r : attnkit::lab::run_scaling(c)) {
    for (const auto* s : {&r.unscaled, &r.scaled}) {
      EXPECT_GE(s->max_weight, 1.0 / c.keys);
      EXPECT_LE(s->max_weight, 1.0);
      EXPECT_GE(s->entropy, 0.0);
      EXPECT_LE(s->entropy, 1.0);
      EXPECT_GE(s->jacobian_norm, 0.0);
      EXPECT_LE(s->jacobian_norm, 0.5);
      EXPECT_GE(s->saturated, 0.0);
      EXPECT_LE(s->saturated, 1.0);
    }
  }
}

// Without the factor the logits' std grows as √d_k and softmax saturates: at d_k = 1024 (std 32)
// the top logit of 64 leads the next by ~std/√(2 ln m) ≈ 11, so the largest weight is near 1 and
// the gradient through the softmax shrinks. With it, the logits keep unit variance for every d_k,
// so the row figures do not move with d_k beyond sampling noise. That noise is largest at small d_k,
// where a row's logit variance |q|²/d_k itself varies (χ²_d/d): over 50 × 16 rows the mean largest
// weight spreads by about ±5% there (seen over many seeds), so 20% is the bound; the saturating
// effects it is compared with are factors of 2 to 9.
TEST(LabScaling, UnscaledSaturatesScaledStaysPut) {
  ATTNKIT_TRACE_SEED();
  ScalingConfig c = small_config(attnkit::testing::test_seed());
  c.trials = 50;
  c.dims = {4, 64, 1024};
  const std::vector<ScalingRow> rows = attnkit::lab::run_scaling(c);
  const ScalingRow& large = rows.back();
  EXPECT_GT(large.unscaled.max_weight, 0.9);
  EXPECT_LT(large.unscaled.entropy, 0.1);
  EXPECT_GT(large.unscaled.saturated, 0.5);
  EXPECT_LT(large.unscaled.jacobian_norm, 0.7 * large.scaled.jacobian_norm);
  for (const ScalingRow& r : rows) {
    SCOPED_TRACE("d_k " + std::to_string(r.d_k));
    EXPECT_NEAR(r.scaled.max_weight, large.scaled.max_weight, 0.2 * large.scaled.max_weight);
    EXPECT_NEAR(r.scaled.entropy, large.scaled.entropy, 0.03);
    EXPECT_NEAR(r.scaled.jacobian_norm, large.scaled.jacobian_norm, 0.2 * large.scaled.jacobian_norm);
    EXPECT_LT(r.scaled.saturated, 0.01);
  }
}

// Equicorrelated entries (ρ between the entries of one vector) give E[s²] = tr(Σ²) = d + ρ²d(d − 1):
// after the factor the variance is 1 + ρ²(d − 1), not 1. The factor assumes independence.
// At ρ = 0.2, d = 256 the logits are dominated by ρ·d·c_q·c_k (the shared factors), so a trial's mean
// s² is about ρ²d²·mean(c_q²)·mean(c_k²) over its n queries and m keys: relative variance
// ≈ 2/n + 2/m per trial, σ ≈ sqrt((2/n + 2/m)/T) over T trials; the test allows 5σ.
TEST(LabScaling, CorrelatedEntriesBreakTheUnitVariance) {
  ATTNKIT_TRACE_SEED();
  ScalingConfig c = small_config(attnkit::testing::test_seed());
  c.dims = {256};
  c.trials = 50;
  c.correlation = 0.2;
  const ScalingRow r = attnkit::lab::run_scaling(c)[0];
  const double expected = 1 + 0.04 * 255;  // 11.2
  const double sigma = std::sqrt((2.0 / c.queries_per_trial + 2.0 / c.keys) / c.trials);
  EXPECT_NEAR(r.scaled.logit_variance / expected, 1.0, 5 * sigma);
}

// ---- the precision experiment ----

TEST(LabPrecision, ErrorsAgainstTheExactOutput) {
  attnkit::lab::PrecisionConfig c;
  c.lengths = {16, 100, 1000};
  c.logit_stds = {1, 10};
  c.queries = 8;
  c.head_dim = 24;
  const attnkit::lab::PrecisionResult result = attnkit::lab::run_precision(c);
  ASSERT_EQ(result.rows.size(), 6u);
  std::vector<std::string> names;
  for (const auto& v : result.variants) names.push_back(v.name);
  ASSERT_GE(names.size(), 2u);
  EXPECT_EQ(names[0], "reference f64");
  const auto column = [&](const std::string& name) {
    return static_cast<std::size_t>(std::find(names.begin(), names.end(), name) - names.begin());
  };
  for (const auto& row : result.rows) {
    SCOPED_TRACE("std " + std::to_string(row.logit_std) + ", m " + std::to_string(row.length));
    ASSERT_EQ(row.errors.size(), names.size());
    EXPECT_LT(row.errors[column("reference f64")], 1e-12);
    EXPECT_GT(row.errors[column("reference f64")], 0.0);  // long double sees float64's rounding
    // float32 arithmetic: a few ulps (6e-8) per step, growing slowly with m; 1e-5 at std 1.
    const double f32_bound = row.logit_std == 1 ? 1e-5 : 1e-4;
    EXPECT_LT(row.errors[column("naive f32")], f32_bound);
    if (column("fast f32") < names.size()) {
      EXPECT_LT(row.errors[column("fast f32")], f32_bound);
      EXPECT_GT(row.errors[column("fast f32")], 1e-9);  // it is float32, not a copy of the reference
    }
    if (column("fast bf16") < names.size()) {
      // bf16 keeps 8 significant bits: its rounding alone is ~2^-9 relative.
      EXPECT_GT(row.errors[column("fast bf16")], 10 * row.errors[column("fast f32")]);
      EXPECT_LT(row.errors[column("fast bf16")], 0.05);
      EXPECT_GT(row.errors[column("fast bf16")], row.errors[column("fast f16")]);
    }
  }
}

// ---- the command ----

std::size_t count_lines(const std::string& text) { return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n')); }

TEST(LabCommand, HelpHasExamples) {
  for (const std::vector<std::string>& args : {std::vector<std::string>{"lab", "--help"},
                                              {"lab", "scaling", "--help"}, {"lab", "precision", "-h"}}) {
    const auto r = run_cli(args);
    EXPECT_EQ(r.code, kOk);
    EXPECT_NE(r.out.find("Examples:"), std::string::npos) << args[1];
  }
  EXPECT_NE(run_cli({"--help"}).out.find("lab"), std::string::npos);
}

TEST(LabCommand, UsageErrorsNameTheArgument) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"lab"}, "which experiment"},
      {{"lab", "entropy"}, "unknown experiment 'entropy'"},
      {{"lab", "scaling", "--keys", "1"}, "--keys"},
      {{"lab", "scaling", "--trials", "0"}, "--trials"},
      {{"lab", "scaling", "--dims", "8,x"}, "--dims"},
      {{"lab", "scaling", "--correlation", "1"}, "--correlation"},
      {{"lab", "scaling", "--input-std", "-1"}, "--input-std"},
      {{"lab", "scaling", "--seed", "-3"}, "--seed"},
      {{"lab", "scaling", "extra"}, "unexpected argument 'extra'"},
      {{"lab", "precision", "--lengths", "0"}, "--lengths"},
      {{"lab", "precision", "--logit-stds", "1,nan"}, "--logit-stds"},
      {{"lab", "precision", "--logit-stds", "1e300"}, "at most 1e4, got 1e+300\n"},  // short, not 300 digits
      {{"lab", "precision", "--keys", "4"}, "unknown flag --keys"},
  };
  for (const auto& [args, expected] : cases) {
    const auto r = run_cli(args);
    EXPECT_EQ(r.code, kUsage) << args.back();
    EXPECT_NE(r.err.find(expected), std::string::npos) << r.err;
  }
}

TEST(LabCommand, ScalingTableJsonAndReproducibility) {
  const std::vector<std::string> args = {"lab", "scaling", "--trials", "2", "--keys", "16", "--dims", "2,32,512"};
  const auto table = run_cli(args);
  ASSERT_EQ(table.code, kOk) << table.err;
  EXPECT_TRUE(table.err.empty()) << "no progress bar off a terminal: " << table.err;
  EXPECT_NE(table.out.find("logit variance"), std::string::npos);
  EXPECT_NE(table.out.find("\n   512 |"), std::string::npos);
  EXPECT_EQ(run_cli(args).out, table.out);

  std::vector<std::string> json_args = args;
  json_args.push_back("--json");
  const auto json = run_cli(json_args);
  ASSERT_EQ(json.code, kOk);
  EXPECT_EQ(count_lines(json.out), 3u);
  for (const char* key : {"\"d_k\": 32", "\"logit_variance_unscaled\"", "\"logit_variance_scaled\"", "\"max_weight_scaled\"",
                          "\"entropy_unscaled\"", "\"jacobian_norm_scaled\"", "\"saturated_unscaled\"", "\"seed\": 1"}) {
    EXPECT_NE(json.out.find(key), std::string::npos) << key;
  }
  json_args.insert(json_args.end(), {"--seed", "2"});
  EXPECT_NE(run_cli(json_args).out, json.out);
}

TEST(LabCommand, PlotsArePngFiles) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("attnkit_lab_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string scaling = (dir / "scaling.png").string(), precision = (dir / "precision.png").string();
  const auto a = run_cli({"lab", "scaling", "--trials", "1", "--keys", "8", "--dims", "2,16", "--plot", scaling});
  ASSERT_EQ(a.code, kOk) << a.err;
  const attnkit::viz::Canvas image = attnkit::viz::read_png(scaling);
  EXPECT_EQ(image.width(), 2 * 520);  // two columns of panels
  EXPECT_GT(image.height(), 2 * 380);
  const auto b = run_cli({"lab", "precision", "--lengths", "8,64", "--queries", "2", "--dim", "8", "--json", "--plot", precision});
  ASSERT_EQ(b.code, kOk) << b.err;
  EXPECT_EQ(attnkit::viz::read_png(precision).width(), 3 * 520);  // one panel per logit std
  EXPECT_NE(b.out.find("\"relative_rms_error\""), std::string::npos);
  const auto bad = run_cli({"lab", "scaling", "--trials", "1", "--dims", "2", "--plot", (dir / "no/such/dir.png").string()});
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("no/such/dir.png"), std::string::npos) << bad.err;
  // A vector file for papers, by extension.
  const std::string pdf = (dir / "scaling.pdf").string();
  ASSERT_EQ(run_cli({"lab", "scaling", "--trials", "1", "--keys", "8", "--dims", "2,16", "--plot", pdf}).code, kOk);
  std::FILE* file = std::fopen(pdf.c_str(), "rb");
  ASSERT_NE(file, nullptr);
  char magic[5] = {};
  EXPECT_EQ(std::fread(magic, 1, 5, file), 5u);
  std::fclose(file);
  EXPECT_EQ(std::string(magic, 5), "%PDF-");
  const std::string svg = (dir / "scaling.svg").string();
  const auto refused = run_cli({"lab", "scaling", "--trials", "1", "--keys", "8", "--dims", "2,16", "--plot", svg});
  EXPECT_EQ(refused.code, 1);
  EXPECT_NE(refused.err.find(svg), std::string::npos) << refused.err;
  EXPECT_EQ(refused.out, "") << "refused before the experiment ran";
  std::filesystem::remove_all(dir);
}

}  // namespace
