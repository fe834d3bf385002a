// Softmax partials (src/core/softmax_partial.hpp): merging the partials of two disjoint key sets
// equals the partial of their union, and finalising gives the softmax-weighted mean and the
// log-sum-exp, with NaN, ±inf and empty sets handled once for every user.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/softmax_partial.hpp"
#include "support/testing.hpp"

namespace attnkit {
namespace {

// A partial with its own accumulator storage.
struct Partial {
  float max = -INFINITY, sum = 0;
  std::vector<float> acc;
  detail::SoftmaxPartial view() { return {.max = max, .sum = sum, .acc = acc.data()}; }
};

// The partial of keys [begin, end) computed directly, in double, then rounded.
Partial direct(const std::vector<double>& s, const std::vector<std::vector<double>>& v, std::size_t begin, std::size_t end) {
  Partial p;
  p.acc.assign(v.empty() ? 0 : v[0].size(), 0.0f);
  double max = -INFINITY;
  for (std::size_t j = begin; j < end; ++j) max = std::max(max, s[j]);
  if (max == -INFINITY) return p;
  double sum = 0;
  std::vector<double> acc(p.acc.size(), 0.0);
  for (std::size_t j = begin; j < end; ++j) {
    const double w = std::exp(s[j] - max);
    sum += w;
    for (std::size_t c = 0; c < acc.size(); ++c) acc[c] += w * v[j][c];
  }
  p.max = static_cast<float>(max);
  p.sum = static_cast<float>(sum);
  for (std::size_t c = 0; c < acc.size(); ++c) p.acc[c] = static_cast<float>(acc[c]);
  return p;
}

TEST(SoftmaxPartial, MergingSplitsEqualsTheWhole) {
  ATTNKIT_TRACE_SEED();
  testing::Rng rng(1);
  const std::size_t m = 50, width = 5;
  std::vector<double> s(m);
  std::vector<std::vector<double>> v(m, std::vector<double>(width));
  for (std::size_t j = 0; j < m; ++j) {
    s[j] = 5 * rng.normal();
    for (double& x : v[j]) x = rng.normal();
  }
  s[7] = -INFINITY;  // a masked key
  const Partial whole = direct(s, v, 0, m);
  for (std::size_t cut : {std::size_t{0}, std::size_t{1}, std::size_t{20}, m}) {
    Partial merged = direct(s, v, 0, cut);
    const Partial right = direct(s, v, cut, m);
    detail::SoftmaxPartial partial = merged.view();
    partial.merge(right.max, right.sum, right.acc.data(), width);
    // The outputs acc/sum and the log-sum-exp max + log(sum) are what must agree.
    EXPECT_NEAR(partial.max + std::log(partial.sum), whole.max + std::log(whole.sum), 1e-5) << cut;
    for (std::size_t c = 0; c < width; ++c) EXPECT_NEAR(merged.acc[c] / partial.sum, whole.acc[c] / whole.sum, 1e-5) << cut;
  }
}

TEST(SoftmaxPartial, EmptySidesAndNan) {
  float acc[2] = {0, 0};
  detail::SoftmaxPartial p{.max = -INFINITY, .sum = 0, .acc = acc};
  const float other_acc[2] = {3, 4};
  p.merge(-INFINITY, 0, other_acc, 2);  // both empty: stays empty
  EXPECT_EQ(p.max, -INFINITY);
  EXPECT_EQ(p.sum, 0.0f);
  p.merge(1.5f, 2.0f, other_acc, 2);  // empty with non-empty: the other
  EXPECT_EQ(p.max, 1.5f);
  EXPECT_EQ(p.sum, 2.0f);
  EXPECT_EQ(acc[1], 4.0f);
  p.merge(-INFINITY, 0, other_acc, 2);  // non-empty with empty: unchanged
  EXPECT_EQ(p.sum, 2.0f);
  EXPECT_EQ(acc[1], 4.0f);
  p.merge(NAN, 1.0f, other_acc, 2);  // NaN poisons the result
  EXPECT_TRUE(std::isnan(p.max) && std::isnan(p.sum) && std::isnan(acc[0]));
}

// The pieces the streaming kernels take in vectors: the merged max propagates NaN from either side
// and the rescale exponent gives factor 1 when nothing was seen, 0 for an empty side, e^(from − to)
// otherwise.
TEST(SoftmaxPartial, MergedMaxAndRescaleExponent) {
  using P = detail::SoftmaxPartial;
  EXPECT_EQ(P::merged_max(-INFINITY, -INFINITY), -INFINITY);
  EXPECT_EQ(P::merged_max(-INFINITY, 2.0f), 2.0f);
  EXPECT_EQ(P::merged_max(3.0f, 2.0f), 3.0f);
  EXPECT_EQ(P::merged_max(INFINITY, 2.0f), INFINITY);
  EXPECT_TRUE(std::isnan(P::merged_max(NAN, 2.0f)));
  EXPECT_TRUE(std::isnan(P::merged_max(2.0f, NAN)));
  EXPECT_TRUE(std::isnan(P::merged_max(-INFINITY, NAN)));
  EXPECT_EQ(std::exp(P::rescale_exponent(-INFINITY, -INFINITY)), 1.0f);  // nothing seen yet
  EXPECT_EQ(std::exp(P::rescale_exponent(-INFINITY, 1.0f)), 0.0f);       // the first visible block
  EXPECT_FLOAT_EQ(std::exp(P::rescale_exponent(1.0f, 3.0f)), std::exp(-2.0f));
  EXPECT_EQ(P::rescale_exponent(3.0f, 3.0f), 0.0f);
  EXPECT_TRUE(std::isnan(P::rescale_exponent(1.0f, NAN)));
}

// finalize: out = acc / sum and lse = max + log(sum), as the direct computation gives them.
TEST(SoftmaxPartial, FinalizingGivesTheWeightedMeanAndTheLogSumExp) {
  const std::vector<double> s = {0.5, -1.0, 2.0};
  const std::vector<std::vector<double>> v = {{1.0, -2.0}, {0.5, 4.0}, {-3.0, 1.0}};
  Partial p = direct(s, v, 0, 3);
  const float lse = p.view().finalize(2);
  double total = 0, mean[2] = {0, 0};
  for (std::size_t j = 0; j < s.size(); ++j) {
    total += std::exp(s[j]);
    for (int c = 0; c < 2; ++c) mean[c] += std::exp(s[j]) * v[j][static_cast<std::size_t>(c)];
  }
  EXPECT_NEAR(lse, std::log(total), 1e-6);
  for (int c = 0; c < 2; ++c) EXPECT_NEAR(p.acc[static_cast<std::size_t>(c)], mean[c] / total, 1e-6) << c;
}

// The empty set (no visible key) gives zeros and −inf, never 0/0; a NaN partial stays NaN; a +inf
// max (an infinite logit) gives lse +inf.
TEST(SoftmaxPartial, FinalizingEmptyNanAndInfinitePartials) {
  float acc[3] = {5.0f, -1.0f, 2.0f};  // garbage an empty row must not keep
  EXPECT_EQ((detail::SoftmaxPartial{.max = -INFINITY, .sum = 0.0f, .acc = acc}.finalize(3)), -INFINITY);
  for (float x : acc) EXPECT_EQ(x, 0.0f);
  float nan_acc[2] = {NAN, 1.0f};
  EXPECT_TRUE(std::isnan(detail::SoftmaxPartial{.max = NAN, .sum = NAN, .acc = nan_acc}.finalize(2)));
  EXPECT_TRUE(std::isnan(nan_acc[0]));
  float inf_acc[1] = {2.0f};
  EXPECT_EQ((detail::SoftmaxPartial{.max = INFINITY, .sum = 1.0f, .acc = inf_acc}.finalize(1)), INFINITY);
  EXPECT_EQ(inf_acc[0], 2.0f);
}

}  // namespace
}  // namespace attnkit
