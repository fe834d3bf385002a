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

struct Partial {
  float max = -INFINITY, sum = 0;
  std::vector<float> acc;
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
    detail::merge_softmax_partial(merged.max, merged.sum, merged.acc.data(), right.max, right.sum, right.acc.data(), width);
    // The outputs acc/sum and the log-sum-exp max + log(sum) are what must agree.
    EXPECT_NEAR(merged.max + std::log(merged.sum), whole.max + std::log(whole.sum), 1e-5) << cut;
    for (std::size_t c = 0; c < width; ++c) EXPECT_NEAR(merged.acc[c] / merged.sum, whole.acc[c] / whole.sum, 1e-5) << cut;
  }
}

TEST(SoftmaxPartial, EmptySidesAndNan) {
  float max = -INFINITY, sum = 0, acc[2] = {0, 0};
  const float other_acc[2] = {3, 4};
  detail::merge_softmax_partial(max, sum, acc, -INFINITY, 0, other_acc, 2);  // both empty: stays empty
  EXPECT_EQ(max, -INFINITY);
  EXPECT_EQ(sum, 0.0f);
  detail::merge_softmax_partial(max, sum, acc, 1.5f, 2.0f, other_acc, 2);  // empty with non-empty: the other
  EXPECT_EQ(max, 1.5f);
  EXPECT_EQ(sum, 2.0f);
  EXPECT_EQ(acc[1], 4.0f);
  detail::merge_softmax_partial(max, sum, acc, -INFINITY, 0, other_acc, 2);  // non-empty with empty: unchanged
  EXPECT_EQ(sum, 2.0f);
  detail::merge_softmax_partial(max, sum, acc, NAN, 1.0f, other_acc, 2);  // NaN poisons the result
  EXPECT_TRUE(std::isnan(max) && std::isnan(sum) && std::isnan(acc[0]));
}

// finalize: out = acc / sum and lse = max + log(sum), as the direct computation gives them.
TEST(SoftmaxPartial, FinalizingGivesTheWeightedMeanAndTheLogSumExp) {
  const std::vector<double> s = {0.5, -1.0, 2.0};
  const std::vector<std::vector<double>> v = {{1.0, -2.0}, {0.5, 4.0}, {-3.0, 1.0}};
  Partial p = direct(s, v, 0, 3);
  const float lse = detail::finalize_softmax_partial(p.max, p.sum, p.acc.data(), 2);
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
  EXPECT_EQ(detail::finalize_softmax_partial(-INFINITY, 0.0f, acc, 3), -INFINITY);
  for (float x : acc) EXPECT_EQ(x, 0.0f);
  float nan_acc[2] = {NAN, 1.0f};
  EXPECT_TRUE(std::isnan(detail::finalize_softmax_partial(NAN, NAN, nan_acc, 2)));
  EXPECT_TRUE(std::isnan(nan_acc[0]));
  float inf_acc[1] = {2.0f};
  EXPECT_EQ(detail::finalize_softmax_partial(INFINITY, 1.0f, inf_acc, 1), INFINITY);
  EXPECT_EQ(inf_acc[0], 2.0f);
}

}  // namespace
}  // namespace attnkit
