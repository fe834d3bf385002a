// The reference forward's semantics, pinned: every option against an independent formulation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/philox.hpp"
#include "support/testing.hpp"

namespace attnkit {
namespace {

using testing::at4;
using testing::ForwardResult;
using testing::max_abs_diff;
using testing::random_tensor;
using testing::Rng;
using testing::run_forward;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kTight = 1e-12;  // float64 vs float64 along different but exact formulations

AttentionOptions reference_options() {
  AttentionOptions o;
  o.kernel = Kernel::reference;
  return o;
}

// A textbook attention written independently of the library: softmax(q·kᵀ·scale + bias)·v with a
// caller-supplied visibility predicate and additive bias, one (b, h) at a time.
template <class Visible, class Bias>
Tensor textbook(const Tensor& q, const Tensor& k, const Tensor& v, double scale, Visible visible, Bias bias) {
  const auto& qs = q.shape();
  const std::int64_t B = qs[0], H = qs[1], n = qs[2], d = qs[3], Hkv = k.shape()[1], m = k.shape()[2],
                     dv = v.shape()[3];
  Tensor out(DType::f64, {B, H, n, dv});
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t g = h / (H / Hkv);
        std::vector<double> z(static_cast<std::size_t>(m), -kInf);
        double zmax = -kInf;
        for (std::int64_t j = 0; j < m; ++j) {
          if (!visible(b, h, i, j)) continue;
          double dot = 0;
          for (std::int64_t c = 0; c < d; ++c) dot += at4(q, b, h, i, c) * at4(k, b, g, j, c);
          z[static_cast<std::size_t>(j)] = dot * scale + bias(b, h, i, j);
          zmax = std::max(zmax, z[static_cast<std::size_t>(j)]);
        }
        double sum = 0;
        for (double zj : z) sum += zj == -kInf ? 0.0 : std::exp(zj - zmax);
        for (std::int64_t j = 0; j < m; ++j) {
          if (z[static_cast<std::size_t>(j)] == -kInf) continue;
          const double p = std::exp(z[static_cast<std::size_t>(j)] - zmax) / sum;
          for (std::int64_t c = 0; c < dv; ++c) at4(out, b, h, i, c) += p * at4(v, b, g, j, c);
        }
      }
  return out;
}

auto all_visible = [](auto...) { return true; };
auto no_bias = [](auto...) { return 0.0; };

TEST(ReferenceForward, WorkedExampleMatchesHandComputation) {
  double qd[] = {0.5, 0.3, -0.2};
  double kd[] = {0.4, 0.2, -0.1, 0.1, 0.1, 0.8, -0.3, 0.4, 0.2};
  double vd[] = {0.9, 0.1, 0.3, 0.2, 0.5, 0.1, 0.3, 0.2, 0.4};
  double o[3], probs[3];
  float lse;
  forward(ConstTensorView::contiguous(qd, DType::f64, {1, 1, 1, 3}), ConstTensorView::contiguous(kd, DType::f64, {1, 1, 3, 3}),
          ConstTensorView::contiguous(vd, DType::f64, {1, 1, 3, 3}), TensorView::contiguous(o, DType::f64, {1, 1, 1, 3}),
          reference_options(),
          {TensorView::contiguous(&lse, DType::f32, {1, 1, 1}), TensorView::contiguous(probs, DType::f64, {1, 1, 1, 3})});
  // By hand: q·k = 0.28, −0.08, −0.07; ÷√3 = 0.161658, −0.046188, −0.040415; softmax below.
  EXPECT_NEAR(probs[0], 0.38031957825570917, kTight);
  EXPECT_NEAR(probs[1], 0.3089457817109054, kTight);
  EXPECT_NEAR(probs[2], 0.31073464003338536, kTight);
  EXPECT_NEAR(o[0], 0.49729716878233493, kTight);
  EXPECT_NEAR(o[1], 0.2546517766877007, kTight);
  EXPECT_NEAR(o[2], 0.2692843076611574, kTight);
  EXPECT_NEAR(lse, 1.1284014596635334, 1e-6);
}

struct Shape {
  std::int64_t B, H, Hkv, n, m, dk, dv;
};
void PrintTo(const Shape& s, std::ostream* os) {
  *os << "B=" << s.B << " H=" << s.H << " Hkv=" << s.Hkv << " n=" << s.n << " m=" << s.m << " d_k=" << s.dk
      << " d_v=" << s.dv;
}

class ReferenceShapes : public ::testing::TestWithParam<Shape> {};

TEST_P(ReferenceShapes, MatchesTextbookFormula) {
  ATTNKIT_TRACE_SEED();
  const Shape s = GetParam();
  Rng rng(1);
  const Tensor q = random_tensor(rng, {s.B, s.H, s.n, s.dk});
  const Tensor k = random_tensor(rng, {s.B, s.Hkv, s.m, s.dk});
  const Tensor v = random_tensor(rng, {s.B, s.Hkv, s.m, s.dv});
  const ForwardResult r = run_forward(q, k, v, reference_options());
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.dk));
  EXPECT_LE(max_abs_diff(r.out, textbook(q, k, v, scale, all_visible, no_bias)), kTight);
}

INSTANTIATE_TEST_SUITE_P(OddSizes, ReferenceShapes,
                         ::testing::Values(Shape{1, 1, 1, 1, 1, 1, 1}, Shape{2, 3, 3, 7, 5, 3, 4},   // n > m, d_v != d_k
                                           Shape{1, 2, 2, 5, 33, 16, 16},                            // n < m
                                           Shape{2, 6, 2, 9, 11, 8, 5},                              // GQA
                                           Shape{1, 4, 1, 4, 13, 7, 2}));                            // MQA

TEST(ReferenceForward, ProbabilitiesAreNonNegativeAndRowsSumToOne) {
  ATTNKIT_TRACE_SEED();
  Rng rng(2);
  const Tensor q = random_tensor(rng, {2, 2, 7, 5}, DType::f64, testing::Distribution::with_outliers);
  const Tensor k = random_tensor(rng, {2, 2, 9, 5}, DType::f64, testing::Distribution::with_outliers);
  const Tensor v = random_tensor(rng, {2, 2, 9, 3});
  const ForwardResult r = run_forward(q, k, v, reference_options());
  const double* p = r.probs.data<double>();
  for (std::int64_t row = 0; row < 2 * 2 * 7; ++row) {
    double sum = 0;
    for (std::int64_t j = 0; j < 9; ++j) {
      EXPECT_GE(p[row * 9 + j], 0.0);
      sum += p[row * 9 + j];
    }
    EXPECT_NEAR(sum, 1.0, kTight);
  }
}

// Visibility written out from docs/semantics.md, independently of the library.
struct Structure {
  Causal causal = Causal::none;
  std::int64_t left = -1, right = -1;
  std::int64_t n = 0, m = 0;
  bool operator()(std::int64_t, std::int64_t, std::int64_t i, std::int64_t j) const {
    const std::int64_t pos = causal == Causal::bottom_right ? i + (m - n) : i;
    if (causal != Causal::none && j > pos) return false;
    if (left >= 0 && j < pos - left) return false;
    if (right >= 0 && j > pos + right) return false;
    return true;
  }
};

struct StructureCase {
  Causal causal;
  std::int64_t left, right, n, m;
};
void PrintTo(const StructureCase& c, std::ostream* os) {
  *os << "causal=" << static_cast<int>(c.causal) << " window=(" << c.left << ", " << c.right << ") n=" << c.n
      << " m=" << c.m;
}

class ReferenceStructure : public ::testing::TestWithParam<StructureCase> {};

TEST_P(ReferenceStructure, CausalAndWindowKeepExactlyTheDesignedKeys) {
  ATTNKIT_TRACE_SEED();
  const StructureCase c = GetParam();
  Rng rng(3);
  const Tensor q = random_tensor(rng, {1, 2, c.n, 4});
  const Tensor k = random_tensor(rng, {1, 2, c.m, 4});
  const Tensor v = random_tensor(rng, {1, 2, c.m, 3});
  AttentionOptions o = reference_options();
  o.causal = c.causal;
  o.window = {c.left, c.right};
  const ForwardResult r = run_forward(q, k, v, o);
  const Structure visible{c.causal, c.left, c.right, c.n, c.m};
  EXPECT_LE(max_abs_diff(r.out, textbook(q, k, v, 0.5, visible, no_bias)), kTight);
  for (std::int64_t h = 0; h < 2; ++h)
    for (std::int64_t i = 0; i < c.n; ++i) {
      bool any = false;
      for (std::int64_t j = 0; j < c.m; ++j) {
        any = any || visible(0, h, i, j);
        if (visible(0, h, i, j)) EXPECT_GT(at4(r.probs, 0, h, i, j), 0.0);
        else EXPECT_EQ(at4(r.probs, 0, h, i, j), 0.0) << "i=" << i << " j=" << j;
      }
      const float lse = r.lse.data<float>()[h * c.n + i];
      if (!any) {
        EXPECT_EQ(lse, -std::numeric_limits<float>::infinity());
        for (std::int64_t col = 0; col < 3; ++col) EXPECT_EQ(at4(r.out, 0, h, i, col), 0.0);
      } else {
        EXPECT_TRUE(std::isfinite(lse));
      }
    }
}

INSTANTIATE_TEST_SUITE_P(
    Alignments, ReferenceStructure,
    ::testing::Values(StructureCase{Causal::top_left, -1, -1, 7, 7}, StructureCase{Causal::top_left, -1, -1, 9, 4},
                      StructureCase{Causal::top_left, -1, -1, 4, 9}, StructureCase{Causal::bottom_right, -1, -1, 4, 9},
                      StructureCase{Causal::bottom_right, -1, -1, 9, 4},  // first n − m rows see nothing
                      StructureCase{Causal::none, 2, 1, 8, 8}, StructureCase{Causal::none, 0, 0, 5, 9},
                      StructureCase{Causal::top_left, 3, -1, 8, 11}, StructureCase{Causal::bottom_right, 2, 0, 3, 10},
                      StructureCase{Causal::none, -1, 2, 6, 6}));

TEST(ReferenceForward, DefaultScaleIsOneOverSqrtDkAndScaleMultipliesLogits) {
  ATTNKIT_TRACE_SEED();
  Rng rng(4);
  const Tensor q = random_tensor(rng, {1, 2, 5, 7});
  const Tensor k = random_tensor(rng, {1, 2, 6, 7});
  const Tensor v = random_tensor(rng, {1, 2, 6, 3});
  AttentionOptions o = reference_options();
  const ForwardResult implicit = run_forward(q, k, v, o);
  o.scale = 1.0 / std::sqrt(7.0);
  EXPECT_TRUE(testing::bitwise_equal(implicit.out, run_forward(q, k, v, o).out));
  o.scale = 0.3;
  EXPECT_LE(max_abs_diff(run_forward(q, k, v, o).out, textbook(q, k, v, 0.3, all_visible, no_bias)), kTight);
}

TEST(ReferenceForward, KeyLengthsEqualTruncatingTheKeys) {
  ATTNKIT_TRACE_SEED();
  Rng rng(5);
  const Tensor q = random_tensor(rng, {3, 2, 4, 5});
  const Tensor k = random_tensor(rng, {3, 2, 8, 5});
  const Tensor v = random_tensor(rng, {3, 2, 8, 6});
  const std::int64_t lengths[] = {8, 3, 0};
  AttentionOptions o = reference_options();
  o.key_lengths = lengths;
  const ForwardResult r = run_forward(q, k, v, o);
  auto visible = [&](std::int64_t b, std::int64_t, std::int64_t, std::int64_t j) { return j < lengths[b]; };
  EXPECT_LE(max_abs_diff(r.out, textbook(q, k, v, 1 / std::sqrt(5.0), visible, no_bias)), kTight);
  for (std::int64_t i = 0; i < 2 * 4; ++i) EXPECT_EQ(r.lse.data<float>()[2 * 8 + i], -std::numeric_limits<float>::infinity());
}

TEST(ReferenceForward, MaskingAKeyEqualsRemovingIt) {
  ATTNKIT_TRACE_SEED();
  Rng rng(6);
  const std::int64_t m = 6, removed = 2;
  const Tensor q = random_tensor(rng, {1, 2, 3, 4});
  Tensor k = random_tensor(rng, {1, 2, m, 4});
  Tensor v = random_tensor(rng, {1, 2, m, 5});
  // The removed key's key and value vectors are NaN: a masked key must not reach the output even
  // through NaN, whether a bool false or an additive −inf masks it.
  for (std::int64_t h = 0; h < 2; ++h) {
    for (std::int64_t c = 0; c < 5; ++c) at4(v, 0, h, removed, c) = std::nan("");
    at4(k, 0, h, removed, 1) = std::nan("");
  }
  Tensor k_less(DType::f64, {1, 2, m - 1, 4}), v_less(DType::f64, {1, 2, m - 1, 5});
  for (std::int64_t h = 0; h < 2; ++h)
    for (std::int64_t j = 0, jj = 0; j < m; ++j) {
      if (j == removed) continue;
      for (std::int64_t c = 0; c < 4; ++c) at4(k_less, 0, h, jj, c) = at4(k, 0, h, j, c);
      for (std::int64_t c = 0; c < 5; ++c) at4(v_less, 0, h, jj, c) = at4(v, 0, h, j, c);
      ++jj;
    }
  const Tensor expected = run_forward(q, k_less, v_less, reference_options()).out;

  bool keep[m] = {true, true, false, true, true, true};
  AttentionOptions o = reference_options();
  o.mask = ConstTensorView::contiguous(keep, DType::boolean, {1, m});  // rank 2, broadcast over rows
  EXPECT_LE(max_abs_diff(run_forward(q, k, v, o).out, expected), kTight);

  double additive[m] = {0, 0, -kInf, 0, 0, 0};  // −inf in an additive mask masks too
  o.mask = ConstTensorView::contiguous(additive, DType::f64, {1, 1, 1, m});
  EXPECT_LE(max_abs_diff(run_forward(q, k, v, o).out, expected), kTight);
}

TEST(ReferenceForward, AdditiveMaskAddsToTheLogitsAndBroadcasts) {
  ATTNKIT_TRACE_SEED();
  Rng rng(7);
  const Tensor q = random_tensor(rng, {2, 3, 4, 5});
  const Tensor k = random_tensor(rng, {2, 3, 6, 5});
  const Tensor v = random_tensor(rng, {2, 3, 6, 2});
  for (DType mask_dtype : {DType::f64, DType::f32}) {
    const Tensor mask = random_tensor(rng, {2, 1, 4, 6}, mask_dtype);  // broadcast over heads
    AttentionOptions o = reference_options();
    o.mask = mask.view();
    auto bias = [&](std::int64_t b, std::int64_t, std::int64_t i, std::int64_t j) {
      return testing::value(mask, (b * 4 + i) * 6 + j);
    };
    EXPECT_LE(max_abs_diff(run_forward(q, k, v, o).out, textbook(q, k, v, 1 / std::sqrt(5.0), all_visible, bias)), kTight);
  }
}

TEST(ReferenceForward, BooleanMaskPerBatchAndHead) {
  ATTNKIT_TRACE_SEED();
  Rng rng(8);
  const Tensor q = random_tensor(rng, {2, 2, 5, 3});
  const Tensor k = random_tensor(rng, {2, 2, 7, 3});
  const Tensor v = random_tensor(rng, {2, 2, 7, 3});
  Tensor keep(DType::boolean, {2, 2, 5, 7});
  for (std::int64_t i = 0; i < keep.numel(); ++i) keep.data<bool>()[i] = rng.uniform() < 0.6;
  AttentionOptions o = reference_options();
  o.mask = keep.view();
  auto visible = [&](std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) {
    return keep.data<bool>()[((b * 2 + h) * 5 + i) * 7 + j];
  };
  const ForwardResult r = run_forward(q, k, v, o);
  EXPECT_LE(max_abs_diff(r.out, textbook(q, k, v, 1 / std::sqrt(3.0), visible, no_bias)), kTight);
  EXPECT_FALSE(testing::has_nan(r.out));
}

TEST(ReferenceForward, AlibiEqualsItsAdditiveBiasUnderBothAlignments) {
  ATTNKIT_TRACE_SEED();
  Rng rng(9);
  const std::int64_t n = 5, m = 8;
  const Tensor q = random_tensor(rng, {1, 2, n, 4});
  const Tensor k = random_tensor(rng, {1, 2, m, 4});
  const Tensor v = random_tensor(rng, {1, 2, m, 3});
  const float slopes[] = {0.5f, 0.125f};
  for (Causal causal : {Causal::none, Causal::top_left, Causal::bottom_right}) {
    AttentionOptions o = reference_options();
    o.alibi_slopes = slopes;
    o.causal = causal;
    const Structure visible{causal, -1, -1, n, m};
    auto bias = [&](std::int64_t, std::int64_t h, std::int64_t i, std::int64_t j) {
      const std::int64_t pos = causal == Causal::bottom_right ? i + (m - n) : i;
      return -static_cast<double>(slopes[h]) * static_cast<double>(std::abs(pos - j));
    };
    EXPECT_LE(max_abs_diff(run_forward(q, k, v, o).out, textbook(q, k, v, 0.5, visible, bias)), kTight);
  }
}

TEST(ReferenceForward, SoftcapAppliesTanhBeforeTheOtherBiases) {
  ATTNKIT_TRACE_SEED();
  Rng rng(10);
  const Tensor q = random_tensor(rng, {1, 1, 4, 3}, DType::f64, testing::Distribution::large);
  const Tensor k = random_tensor(rng, {1, 1, 6, 3});
  const Tensor v = random_tensor(rng, {1, 1, 6, 2});
  const float slopes[] = {0.25f};
  AttentionOptions o = reference_options();
  o.softcap = 5.0;
  o.alibi_slopes = slopes;
  const double scale = 1 / std::sqrt(3.0);
  // Softcap wraps only q·k·scale, the bias is added after it; reproduce it as a visible-all textbook
  // whose "scale" is 1 and whose bias carries the capped logits minus the raw dot product.
  auto capped_minus_raw = [&](std::int64_t, std::int64_t, std::int64_t i, std::int64_t j) {
    double dot = 0;
    for (std::int64_t c = 0; c < 3; ++c) dot += at4(q, 0, 0, i, c) * at4(k, 0, 0, j, c);
    return 5.0 * std::tanh(dot * scale / 5.0) - dot - 0.25 * static_cast<double>(std::abs(i - j));
  };
  EXPECT_LE(max_abs_diff(run_forward(q, k, v, o).out, textbook(q, k, v, 1.0, all_visible, capped_minus_raw)), kTight);
}

TEST(ReferenceForward, GroupedQueryHeadsEqualRepeatedKeyValueHeads) {
  ATTNKIT_TRACE_SEED();
  Rng rng(11);
  for (std::int64_t Hkv : {1, 2, 3}) {
    const std::int64_t H = 6, group = H / Hkv;
    const Tensor q = random_tensor(rng, {2, H, 4, 5});
    const Tensor k = random_tensor(rng, {2, Hkv, 7, 5});
    const Tensor v = random_tensor(rng, {2, Hkv, 7, 3});
    Tensor k_full(DType::f64, {2, H, 7, 5}), v_full(DType::f64, {2, H, 7, 3});
    for (std::int64_t b = 0; b < 2; ++b)
      for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t j = 0; j < 7; ++j) {
          for (std::int64_t c = 0; c < 5; ++c) at4(k_full, b, h, j, c) = at4(k, b, h / group, j, c);
          for (std::int64_t c = 0; c < 3; ++c) at4(v_full, b, h, j, c) = at4(v, b, h / group, j, c);
        }
    AttentionOptions o = reference_options();
    o.causal = Causal::bottom_right;
    EXPECT_TRUE(testing::bitwise_equal(run_forward(q, k, v, o).out, run_forward(q, k_full, v_full, o).out)) << Hkv;
  }
}

TEST(ReferenceForward, HugeLogitsNeitherOverflowNorLoseTheSoftmax) {
  ATTNKIT_TRACE_SEED();
  Rng rng(12);
  const Tensor q = random_tensor(rng, {1, 2, 5, 4});
  const Tensor k = random_tensor(rng, {1, 2, 9, 4});
  const Tensor v = random_tensor(rng, {1, 2, 9, 3});
  const ForwardResult base = run_forward(q, k, v, reference_options());
  for (double shift : {1e4, -1e4}) {
    // Adding the same constant to every logit of a row must not change the output; LSE moves by it.
    double constant = shift;
    AttentionOptions o = reference_options();
    o.mask = ConstTensorView(&constant, DType::f64, {1, 1, 1, 1}, {0, 0, 0, 0});
    const ForwardResult shifted = run_forward(q, k, v, o);
    // Logits near 1e4 are rounded to double's ulp there, 1.8e-12, so outputs may move by a few of it.
    EXPECT_LE(max_abs_diff(shifted.out, base.out), 1e-11);
    for (std::int64_t i = 0; i < 10; ++i) EXPECT_NEAR(shifted.lse.data<float>()[i], base.lse.data<float>()[i] + shift, 2e-3);
  }
  // Raw logits of ±1e4 from the inputs themselves: one dominant key takes all the weight.
  double qd[] = {100.0}, kd[] = {100.0, 99.9, -100.0}, vd[] = {1.0, 2.0, 3.0}, o[1], p[3];
  AttentionOptions unit = reference_options();
  unit.scale = 1.0;
  forward(ConstTensorView::contiguous(qd, DType::f64, {1, 1, 1, 1}), ConstTensorView::contiguous(kd, DType::f64, {1, 1, 3, 1}),
          ConstTensorView::contiguous(vd, DType::f64, {1, 1, 3, 1}), TensorView::contiguous(o, DType::f64, {1, 1, 1, 1}), unit,
          {std::nullopt, TensorView::contiguous(p, DType::f64, {1, 1, 1, 3})});
  const double ratio = std::exp(-10.0);  // logits 1e4 and 9990
  EXPECT_NEAR(p[0], 1 / (1 + ratio), kTight);
  EXPECT_NEAR(p[1], ratio / (1 + ratio), kTight);
  EXPECT_EQ(p[2], 0.0);  // exp(−2e4) underflows to an exact 0, correctly
  EXPECT_NEAR(o[0], (1 + 2 * ratio) / (1 + ratio), kTight);
}

TEST(ReferenceForward, PermutingKeysAndValuesTogetherLeavesOutputUnchanged) {
  ATTNKIT_TRACE_SEED();
  Rng rng(13);
  const std::int64_t m = 9;
  const Tensor q = random_tensor(rng, {2, 2, 4, 3});
  const Tensor k = random_tensor(rng, {2, 2, m, 3});
  const Tensor v = random_tensor(rng, {2, 2, m, 5});
  std::vector<std::int64_t> perm(m);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937_64(testing::test_seed()));
  Tensor kp(DType::f64, {2, 2, m, 3}), vp(DType::f64, {2, 2, m, 5});
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t h = 0; h < 2; ++h)
      for (std::int64_t j = 0; j < m; ++j) {
        const std::int64_t src = perm[static_cast<std::size_t>(j)];
        for (std::int64_t c = 0; c < 3; ++c) at4(kp, b, h, j, c) = at4(k, b, h, src, c);
        for (std::int64_t c = 0; c < 5; ++c) at4(vp, b, h, j, c) = at4(v, b, h, src, c);
      }
  EXPECT_LE(max_abs_diff(run_forward(q, k, v, reference_options()).out, run_forward(q, kp, vp, reference_options()).out), 1e-13);
}

TEST(ReferenceForward, NanReachesExactlyTheOutputsThatDependOnIt) {
  ATTNKIT_TRACE_SEED();
  Rng rng(14);
  const std::int64_t n = 5, m = 5;
  Tensor q = random_tensor(rng, {1, 1, n, 3});
  Tensor k = random_tensor(rng, {1, 1, m, 3});
  Tensor v = random_tensor(rng, {1, 1, m, 4});
  AttentionOptions o = reference_options();
  o.causal = Causal::top_left;  // key j is visible to rows i >= j
  const double nan = std::nan("");

  auto nan_pattern = [&](const Tensor& out) {
    std::vector<std::vector<bool>> pattern(n, std::vector<bool>(4));
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t c = 0; c < 4; ++c) pattern[i][c] = std::isnan(at4(out, 0, 0, i, c));
    return pattern;
  };
  {  // NaN in q row 2: exactly row 2, and its LSE
    Tensor q2 = q;
    at4(q2, 0, 0, 2, 1) = nan;
    const ForwardResult r = run_forward(q2, k, v, o);
    for (std::int64_t i = 0; i < n; ++i) {
      for (std::int64_t c = 0; c < 4; ++c) EXPECT_EQ(std::isnan(at4(r.out, 0, 0, i, c)), i == 2);
      EXPECT_EQ(std::isnan(r.lse.data<float>()[i]), i == 2);
    }
  }
  {  // NaN in k row 3: rows 3 and 4, which see key 3
    Tensor k2 = k;
    at4(k2, 0, 0, 3, 0) = nan;
    const auto pattern = nan_pattern(run_forward(q, k2, v, o).out);
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t c = 0; c < 4; ++c) EXPECT_EQ(pattern[i][c], i >= 3) << i << "," << c;
  }
  {  // NaN in v[1, 2]: column 2 of rows 1..4
    Tensor v2 = v;
    at4(v2, 0, 0, 1, 2) = nan;
    const auto pattern = nan_pattern(run_forward(q, k, v2, o).out);
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t c = 0; c < 4; ++c) EXPECT_EQ(pattern[i][c], i >= 1 && c == 2) << i << "," << c;
  }
  {  // NaN in an additive mask entry (1, 0): row 1 only
    Tensor mask(DType::f64, {1, 1, n, m});
    at4(mask, 0, 0, 1, 0) = nan;
    at4(mask, 0, 0, 0, 4) = nan;  // masked by causality: must not leak
    AttentionOptions om = o;
    om.mask = mask.view();
    const auto pattern = nan_pattern(run_forward(q, k, v, om).out);
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t c = 0; c < 4; ++c) EXPECT_EQ(pattern[i][c], i == 1) << i << "," << c;
  }
}

TEST(ReferenceForward, RowsWithNoVisibleKeyGiveZerosAndMinusInfinityLse) {
  ATTNKIT_TRACE_SEED();
  Rng rng(15);
  const Tensor q = random_tensor(rng, {1, 1, 3, 2});
  const Tensor k = random_tensor(rng, {1, 1, 4, 2});
  const Tensor v = random_tensor(rng, {1, 1, 4, 2});
  bool keep[3 * 4] = {true, true, false, false, false, false, false, false, false, true, true, true};
  double additive[3 * 4] = {0, 0, 0, 0, -kInf, -kInf, -kInf, -kInf, 0, 0, 0, 0};
  for (int kind = 0; kind < 2; ++kind) {
    AttentionOptions o = reference_options();
    o.mask = kind == 0 ? ConstTensorView::contiguous(keep, DType::boolean, {3, 4})
                       : ConstTensorView::contiguous(additive, DType::f64, {3, 4});
    const ForwardResult r = run_forward(q, k, v, o);
    EXPECT_EQ(r.lse.data<float>()[1], -std::numeric_limits<float>::infinity());
    EXPECT_TRUE(std::isfinite(r.lse.data<float>()[0]));
    for (std::int64_t c = 0; c < 2; ++c) EXPECT_EQ(at4(r.out, 0, 0, 1, c), 0.0);
    for (std::int64_t j = 0; j < 4; ++j) EXPECT_EQ(at4(r.probs, 0, 0, 1, j), 0.0);
    EXPECT_FALSE(testing::has_nan(r.out));
    EXPECT_FALSE(testing::has_nan(r.probs));
  }
}

TEST(ReferenceForward, ZeroSizesAreValid) {
  Rng rng(16);
  // m = 0: every row is empty, so zeros and −inf.
  {
    const ForwardResult r =
        run_forward(random_tensor(rng, {2, 2, 3, 4}), Tensor(DType::f64, {2, 2, 0, 4}), Tensor(DType::f64, {2, 2, 0, 5}),
                    reference_options());
    for (double x : testing::values(r.out)) EXPECT_EQ(x, 0.0);
    for (double x : testing::values(r.lse)) EXPECT_EQ(x, -kInf);
  }
  // n = 0, B = 0, H = 0, d_v = 0: empty outputs, nothing to do, no error.
  run_forward(Tensor(DType::f64, {2, 2, 0, 4}), random_tensor(rng, {2, 2, 3, 4}), random_tensor(rng, {2, 2, 3, 5}));
  run_forward(Tensor(DType::f64, {0, 2, 3, 4}), Tensor(DType::f64, {0, 2, 3, 4}), Tensor(DType::f64, {0, 2, 3, 5}));
  run_forward(Tensor(DType::f64, {1, 0, 3, 4}), Tensor(DType::f64, {1, 0, 3, 4}), Tensor(DType::f64, {1, 0, 3, 5}));
  run_forward(random_tensor(rng, {1, 1, 3, 4}), random_tensor(rng, {1, 1, 3, 4}), Tensor(DType::f64, {1, 1, 3, 0}));
  // d_k = 0: every logit is 0, so the weights are uniform.
  const Tensor v = random_tensor(rng, {1, 1, 4, 2});
  const ForwardResult r = run_forward(Tensor(DType::f64, {1, 1, 2, 0}), Tensor(DType::f64, {1, 1, 4, 0}), v);
  for (std::int64_t c = 0; c < 2; ++c) {
    double mean = 0;
    for (std::int64_t j = 0; j < 4; ++j) mean += at4(v, 0, 0, j, c) / 4;
    EXPECT_NEAR(at4(r.out, 0, 0, 1, c), mean, kTight);
  }
}

TEST(ReferenceForward, SequenceMajorLayoutViaStridesEqualsContiguous) {
  ATTNKIT_TRACE_SEED();
  Rng rng(17);
  const std::int64_t B = 2, S = 5, H = 3, D = 4;
  // Memory [B, S, H, D], seen as logical [B, H, S, D] without a copy; the output is strided too.
  const Tensor q_bshd = random_tensor(rng, {B, S, H, D});
  const Tensor k_bshd = random_tensor(rng, {B, S, H, D});
  const Tensor v_bshd = random_tensor(rng, {B, S, H, D});
  Tensor o_bshd(DType::f64, {B, S, H, D});
  testing::poison(o_bshd);
  AttentionOptions o = reference_options();
  o.causal = Causal::top_left;
  forward(q_bshd.view().permuted({0, 2, 1, 3}), k_bshd.view().permuted({0, 2, 1, 3}), v_bshd.view().permuted({0, 2, 1, 3}),
          o_bshd.view().permuted({0, 2, 1, 3}), o);
  auto to_bhsd = [&](const Tensor& t) { return Tensor::converted(t.view().permuted({0, 2, 1, 3}), DType::f64); };
  const Tensor expected = run_forward(to_bhsd(q_bshd), to_bhsd(k_bshd), to_bhsd(v_bshd), o).out;
  EXPECT_TRUE(testing::bitwise_equal(to_bhsd(o_bshd), expected));
}

TEST(ReferenceForward, NarrowStorageComputesInFloat64AndRoundsOnce) {
  ATTNKIT_TRACE_SEED();
  Rng rng(18);
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    const Tensor q = random_tensor(rng, {1, 2, 5, 8}, dtype);
    const Tensor k = random_tensor(rng, {1, 2, 7, 8}, dtype);
    const Tensor v = random_tensor(rng, {1, 2, 7, 3}, dtype);
    const Tensor narrow = run_forward(q, k, v, reference_options(), dtype).out;
    const Tensor wide = run_forward(Tensor::converted(q.view(), DType::f64), Tensor::converted(k.view(), DType::f64),
                                    Tensor::converted(v.view(), DType::f64), reference_options())
                            .out;
    EXPECT_TRUE(testing::bitwise_equal(narrow, Tensor::converted(wide.view(), dtype))) << dtype_name(dtype);
  }
}

TEST(ReferenceForward, DropoutKeepsOrDropsEachWeightAndScalesTheKept) {
  ATTNKIT_TRACE_SEED();
  Rng rng(19);
  const std::int64_t n = 16, m = 64;
  const Tensor q = random_tensor(rng, {2, 2, n, 4});
  const Tensor k = random_tensor(rng, {2, 2, m, 4});
  // V = identity: out[i, j] is exactly the (dropped-out) weight of key j.
  Tensor v(DType::f64, {2, 2, m, m});
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t h = 0; h < 2; ++h)
      for (std::int64_t j = 0; j < m; ++j) at4(v, b, h, j, j) = 1.0;
  AttentionOptions o = reference_options();
  o.dropout_p = 0.25;
  o.seed = 1234;
  const ForwardResult r = run_forward(q, k, v, o);
  std::int64_t dropped = 0;
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t h = 0; h < 2; ++h)
      for (std::int64_t i = 0; i < n; ++i)
        for (std::int64_t j = 0; j < m; ++j) {
          const double weight = at4(r.out, b, h, i, j), p = at4(r.probs, b, h, i, j);
          const bool keeps = detail::dropout_keeps(o.seed, o.dropout_p, b, h, i, j);
          EXPECT_DOUBLE_EQ(weight, keeps ? p / 0.75 : 0.0);
          dropped += keeps ? 0 : 1;
        }
  // 4096 Bernoulli(0.25) draws: mean 1024, standard deviation ~28; ±6σ never fails by chance.
  EXPECT_NEAR(static_cast<double>(dropped), 1024.0, 170.0);
  // Same seed, same result; another seed, another mask.
  EXPECT_TRUE(testing::bitwise_equal(run_forward(q, k, v, o).out, r.out));
  o.seed = 1235;
  EXPECT_FALSE(testing::bitwise_equal(run_forward(q, k, v, o).out, r.out));
}

TEST(Philox, MatchesPublishedKnownAnswers) {
  // Known-answer vectors of Philox4x32-10 from the Random123 distribution (kat_vectors).
  using detail::philox4x32_10;
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, 0), (detail::Philox4x32{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, ~0ull),
            (detail::Philox4x32{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, 0x299f31d0a4093822ull),
            (detail::Philox4x32{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(ReferenceForward, ResultsDoNotDependOnTheThreadCount) {
  ATTNKIT_TRACE_SEED();
  Rng rng(20);
  const Tensor q = random_tensor(rng, {3, 4, 9, 5});
  const Tensor k = random_tensor(rng, {3, 2, 11, 5});
  const Tensor v = random_tensor(rng, {3, 2, 11, 6});
  AttentionOptions o = reference_options();
  o.dropout_p = 0.1;
  o.causal = Causal::bottom_right;
  set_num_threads(1);
  const ForwardResult one = run_forward(q, k, v, o);
  for (int threads : {2, 3, 7}) {
    set_num_threads(threads);
    const ForwardResult many = run_forward(q, k, v, o);
    EXPECT_TRUE(testing::bitwise_equal(one.out, many.out)) << threads;
    EXPECT_TRUE(testing::bitwise_equal(one.lse, many.lse)) << threads;
  }
  set_num_threads(0);
}

TEST(ReferenceForward, EveryOptionTogetherMatchesTextbook) {
  ATTNKIT_TRACE_SEED();
  Rng rng(21);
  const std::int64_t B = 2, H = 4, Hkv = 2, n = 6, m = 9;
  const Tensor q = random_tensor(rng, {B, H, n, 5}, DType::f64, testing::Distribution::with_outliers);
  const Tensor k = random_tensor(rng, {B, Hkv, m, 5});
  const Tensor v = random_tensor(rng, {B, Hkv, m, 3});
  const Tensor additive = random_tensor(rng, {1, H, n, m});
  const std::int64_t lengths[] = {9, 7};
  const float slopes[] = {0.1f, 0.2f, 0.3f, 0.4f};
  AttentionOptions o = reference_options();
  o.scale = 0.7;
  o.causal = Causal::bottom_right;
  o.window = {4, -1};
  o.mask = additive.view();
  o.key_lengths = lengths;
  o.alibi_slopes = slopes;
  o.softcap = 3.0;
  const Structure structure{Causal::bottom_right, 4, -1, n, m};
  auto visible = [&](std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) {
    return structure(b, h, i, j) && j < lengths[b];
  };
  auto bias = [&](std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) {
    double dot = 0;
    for (std::int64_t c = 0; c < 5; ++c) dot += at4(q, b, h, i, c) * at4(k, b, h / 2, j, c);
    const double capped = 3.0 * std::tanh(dot * 0.7 / 3.0);
    return capped - dot - slopes[h] * static_cast<double>(std::abs(i + (m - n) - j)) + at4(additive, 0, h, i, j);
  };
  EXPECT_LE(max_abs_diff(run_forward(q, k, v, o).out, textbook(q, k, v, 1.0, visible, bias)), kTight);
}

}  // namespace
}  // namespace attnkit
