// The one merge of partial softmax results (src/cpu/softmax_merge.hpp): merging the partials of two
// disjoint key sets equals the partial of their union.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cpu/softmax_merge.hpp"
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

TEST(SoftmaxMerge, MergingSplitsEqualsTheWhole) {
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
    cpu::merge_softmax_partial(merged.max, merged.sum, merged.acc.data(), right.max, right.sum, right.acc.data(), width);
    // The outputs acc/sum and the log-sum-exp max + log(sum) are what must agree.
    EXPECT_NEAR(merged.max + std::log(merged.sum), whole.max + std::log(whole.sum), 1e-5) << cut;
    for (std::size_t c = 0; c < width; ++c) EXPECT_NEAR(merged.acc[c] / merged.sum, whole.acc[c] / whole.sum, 1e-5) << cut;
  }
}

TEST(SoftmaxMerge, EmptySidesAndNan) {
  float max = -INFINITY, sum = 0, acc[2] = {0, 0};
  const float other_acc[2] = {3, 4};
  cpu::merge_softmax_partial(max, sum, acc, -INFINITY, 0, other_acc, 2);  // both empty: stays empty
  EXPECT_EQ(max, -INFINITY);
  EXPECT_EQ(sum, 0.0f);
  cpu::merge_softmax_partial(max, sum, acc, 1.5f, 2.0f, other_acc, 2);  // empty with non-empty: the other
  EXPECT_EQ(max, 1.5f);
  EXPECT_EQ(sum, 2.0f);
  EXPECT_EQ(acc[1], 4.0f);
  cpu::merge_softmax_partial(max, sum, acc, -INFINITY, 0, other_acc, 2);  // non-empty with empty: unchanged
  EXPECT_EQ(sum, 2.0f);
  cpu::merge_softmax_partial(max, sum, acc, NAN, 1.0f, other_acc, 2);  // NaN poisons the result
  EXPECT_TRUE(std::isnan(max) && std::isnan(sum) && std::isnan(acc[0]));
}

}  // namespace
}  // namespace attnkit
