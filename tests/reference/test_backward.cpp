// The reference backward, checked against central finite differences of the reference forward for
// every option, and for the guarantees (zero gradients of empty rows, determinism, storage dtypes).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "support/testing.hpp"

namespace attnkit {
namespace {

using testing::random_tensor;
using testing::Rng;

struct Gradients {
  Tensor dq, dk, dv;
};

// Analytic gradients of L = Σ g ∘ out by the reference kernel, in the storage dtype of q.
Gradients analytic(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, AttentionOptions o) {
  o.kernel = Kernel::reference;
  const testing::ForwardResult fwd = testing::run_forward(q, k, v, o, q.dtype());
  Gradients grads{testing::poisoned(q.dtype(), q.shape()), testing::poisoned(q.dtype(), k.shape()),
                  testing::poisoned(q.dtype(), v.shape())};
  backward(q.view(), k.view(), v.view(), fwd.out.view(), g.view(), fwd.lse.view(), grads.dq.view(), grads.dk.view(),
           grads.dv.view(), o);
  return grads;
}

double loss(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const AttentionOptions& o) {
  const Tensor out = testing::run_forward(q, k, v, o).out;
  double sum = 0;
  for (std::int64_t i = 0; i < out.numel(); ++i) sum += out.data<double>()[i] * g.data<double>()[i];
  return sum;
}

// Compares every element of `grad` with the central difference of the loss in that input element.
void expect_matches_finite_differences(const char* name, Tensor& input, const Tensor& grad,
                                       const std::function<double()>& loss_of_inputs) {
  constexpr double kStep = 1e-6;       // central differences: truncation ~ step², rounding ~ 1e-16 / step
  constexpr double kTolerance = 1e-7;  // relative to 1 + |gradient|
  double* x = input.data<double>();
  for (std::int64_t i = 0; i < input.numel(); ++i) {
    const double saved = x[i];
    x[i] = saved + kStep;
    const double up = loss_of_inputs();
    x[i] = saved - kStep;
    const double down = loss_of_inputs();
    x[i] = saved;
    const double numeric = (up - down) / (2 * kStep);
    const double exact = grad.data<double>()[i];
    ASSERT_NEAR(exact, numeric, kTolerance * (1 + std::fabs(exact))) << name << " element " << i;
  }
}

struct OptionCase {
  std::string name;
  std::function<void(AttentionOptions&)> set;
  std::int64_t n = 5, m = 6;
};

void PrintTo(const OptionCase& c, std::ostream* os) { *os << c.name << " n=" << c.n << " m=" << c.m; }

class ReferenceBackward : public ::testing::TestWithParam<OptionCase> {};

const std::int64_t kLengths[] = {6, 0};   // the second batch entry sees no key at all
const std::int64_t kLengthsLong[] = {4, 2};
const float kSlopes[] = {0.5f, 0.25f, 0.125f, 0.0625f};
bool kKeep[5 * 6];
double kAdditive[4 * 5 * 6];

TEST_P(ReferenceBackward, MatchesFiniteDifferences) {
  ATTNKIT_TRACE_SEED();
  const OptionCase& c = GetParam();
  Rng rng(100);
  for (bool& keep : kKeep) keep = rng.uniform() < 0.7;
  for (double& a : kAdditive) a = rng.normal();
  const std::int64_t B = 2, H = 4, Hkv = 2, dk = 3, dv = 4;
  Tensor q = random_tensor(rng, {B, H, c.n, dk});
  Tensor k = random_tensor(rng, {B, Hkv, c.m, dk});
  Tensor v = random_tensor(rng, {B, Hkv, c.m, dv});
  const Tensor g = random_tensor(rng, {B, H, c.n, dv});
  AttentionOptions o;
  o.kernel = Kernel::reference;
  c.set(o);
  const Gradients grads = analytic(q, k, v, g, o);
  auto L = [&] { return loss(q, k, v, g, o); };
  expect_matches_finite_differences("dq", q, grads.dq, L);
  expect_matches_finite_differences("dk", k, grads.dk, L);
  expect_matches_finite_differences("dv", v, grads.dv, L);
}

INSTANTIATE_TEST_SUITE_P(
    EveryOption, ReferenceBackward,
    ::testing::Values(
        OptionCase{"plain", [](AttentionOptions&) {}},
        OptionCase{"scale", [](AttentionOptions& o) { o.scale = 1.7; }},
        OptionCase{"causal_top_left", [](AttentionOptions& o) { o.causal = Causal::top_left; }},
        OptionCase{"causal_bottom_right_more_queries", [](AttentionOptions& o) { o.causal = Causal::bottom_right; }, 7, 4},
        OptionCase{"causal_bottom_right_more_keys", [](AttentionOptions& o) { o.causal = Causal::bottom_right; }, 3, 6},
        OptionCase{"window", [](AttentionOptions& o) { o.window = {1, 2}; }},
        OptionCase{"bool_mask",
                   [](AttentionOptions& o) { o.mask = ConstTensorView::contiguous(kKeep, DType::boolean, {5, 6}); }},
        OptionCase{"additive_mask",
                   [](AttentionOptions& o) { o.mask = ConstTensorView::contiguous(kAdditive, DType::f64, {1, 4, 5, 6}); }},
        OptionCase{"key_lengths", [](AttentionOptions& o) { o.key_lengths = kLengths; }},
        OptionCase{"alibi", [](AttentionOptions& o) { o.alibi_slopes = kSlopes; }},
        OptionCase{"softcap", [](AttentionOptions& o) { o.softcap = 0.8; }},
        OptionCase{"dropout",
                   [](AttentionOptions& o) {
                     o.dropout_p = 0.3;
                     o.seed = 77;
                   }},
        OptionCase{"everything",
                   [](AttentionOptions& o) {
                     o.scale = 0.9;
                     o.causal = Causal::bottom_right;
                     o.window = {3, -1};
                     o.mask = ConstTensorView::contiguous(kAdditive, DType::f64, {1, 4, 5, 6});
                     o.key_lengths = kLengthsLong;
                     o.alibi_slopes = kSlopes;
                     o.softcap = 2.0;
                     o.dropout_p = 0.2;
                     o.seed = 5;
                   }}),
    [](const ::testing::TestParamInfo<OptionCase>& info) { return info.param.name; });

TEST(ReferenceBackwardGuarantees, RowsWithNoVisibleKeyGiveZeroGradients) {
  ATTNKIT_TRACE_SEED();
  Rng rng(101);
  // Bottom-right with n = 6 > m = 3: query rows 0..2 see no key.
  const Tensor q = random_tensor(rng, {1, 2, 6, 3});
  const Tensor k = random_tensor(rng, {1, 1, 3, 3});
  const Tensor v = random_tensor(rng, {1, 1, 3, 2});
  const Tensor g = random_tensor(rng, {1, 2, 6, 2});
  AttentionOptions o;
  o.causal = Causal::bottom_right;
  const Gradients grads = analytic(q, k, v, g, o);
  EXPECT_FALSE(testing::has_nan(grads.dq) || testing::has_nan(grads.dk) || testing::has_nan(grads.dv));
  for (std::int64_t h = 0; h < 2; ++h)
    for (std::int64_t i = 0; i < 3; ++i)
      for (std::int64_t c = 0; c < 3; ++c) EXPECT_EQ(testing::at4(grads.dq, 0, h, i, c), 0.0);
  // m = 0: nothing is visible anywhere.
  const Gradients empty = analytic(q, Tensor(DType::f64, {1, 1, 0, 3}), Tensor(DType::f64, {1, 1, 0, 2}), g, o);
  for (double x : testing::values(empty.dq)) EXPECT_EQ(x, 0.0);
}

TEST(ReferenceBackwardGuarantees, DeterministicForAnyThreadCount) {
  ATTNKIT_TRACE_SEED();
  Rng rng(102);
  const Tensor q = random_tensor(rng, {2, 6, 7, 4});
  const Tensor k = random_tensor(rng, {2, 2, 9, 4});
  const Tensor v = random_tensor(rng, {2, 2, 9, 5});
  const Tensor g = random_tensor(rng, {2, 6, 7, 5});
  AttentionOptions o;
  o.dropout_p = 0.2;
  set_num_threads(1);
  const Gradients one = analytic(q, k, v, g, o);
  for (int threads : {2, 5}) {
    set_num_threads(threads);
    const Gradients many = analytic(q, k, v, g, o);
    EXPECT_TRUE(testing::bitwise_equal(one.dq, many.dq) && testing::bitwise_equal(one.dk, many.dk) &&
                testing::bitwise_equal(one.dv, many.dv))
        << threads;
  }
  set_num_threads(0);
}

TEST(ReferenceBackwardGuarantees, NarrowStorageComputesInFloat64AndRoundsOnce) {
  ATTNKIT_TRACE_SEED();
  Rng rng(103);
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    const Tensor q = random_tensor(rng, {1, 2, 5, 4}, dtype);
    const Tensor k = random_tensor(rng, {1, 1, 6, 4}, dtype);
    const Tensor v = random_tensor(rng, {1, 1, 6, 3}, dtype);
    const Tensor g = random_tensor(rng, {1, 2, 5, 3}, dtype);
    const Gradients narrow = analytic(q, k, v, g, {});
    auto wide = [](const Tensor& t) { return Tensor::converted(t.view(), DType::f64); };
    const Gradients exact = analytic(wide(q), wide(k), wide(v), wide(g), {});
    EXPECT_TRUE(testing::bitwise_equal(narrow.dq, Tensor::converted(exact.dq.view(), dtype))) << dtype_name(dtype);
    EXPECT_TRUE(testing::bitwise_equal(narrow.dk, Tensor::converted(exact.dk.view(), dtype))) << dtype_name(dtype);
    EXPECT_TRUE(testing::bitwise_equal(narrow.dv, Tensor::converted(exact.dv.view(), dtype))) << dtype_name(dtype);
  }
}

}  // namespace
}  // namespace attnkit
