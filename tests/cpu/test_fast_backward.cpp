// The fast backward kernel against the float64 reference backward, on every target this CPU supports,
// with the accuracy rule of docs/semantics.md applied to each gradient (dq, dk, dv): error ≤ 2 × (error
// of the naive float32 backward on the same inputs) + a small floor, where error is the
// root-mean-square difference from the reference (and the NaN pattern must match exactly). The
// inputs out and lse come from the fast forward, as in training. Also: finite differences of the
// float64 reference forward, determinism across thread counts, NaN propagation and the guarantees
// of attnkit/attention.hpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "attnkit/targets.hpp"
#include "support/naive_f32.hpp"
#include "support/testing.hpp"

namespace attnkit {
namespace {

using testing::Distribution;
using testing::ForwardResult;
using testing::NaiveGradients;
using testing::random_tensor;
using testing::Rng;

// The kernel under test. Pointing it at Kernel::reference checks this harness itself: the float64
// reference must pass every test here with room to spare.
constexpr Kernel kKernelUnderTest = Kernel::fast;

constexpr double kFloor = 1e-7;  // absolute, relative to max(1, |reference gradient|), as for the forward
// The naive kernel is checked too, so that a mistake in it cannot loosen the rule unseen: its RMS
// error stays below this, relative to max(1, |reference gradient|) (bf16 rounding is ~2e-3).
constexpr double kNaiveSanity = 1e-2;

// Runs `body` once per supported target with that target forced, then restores the default.
void for_each_target(const std::function<void(Target)>& body) {
  for (Target t : supported_targets()) {
    SCOPED_TRACE(std::string("target ") + target_name(t));
    set_target(t);
    body(t);
  }
  reset_target();
}

AttentionOptions with_kernel(AttentionOptions o, Kernel kernel) {
  o.kernel = kernel;
  return o;
}

Tensor wide(const Tensor& t) { return Tensor::converted(t.view(), DType::f64); }

double rms(const Tensor& t) {
  double sum = 0;
  for (double x : testing::values(t)) sum += x * x;
  return t.numel() == 0 ? 0.0 : std::sqrt(sum / static_cast<double>(t.numel()));
}

double max_abs(const Tensor& t) {
  double worst = 0;
  for (double x : testing::values(t))
    if (std::isfinite(x)) worst = std::max(worst, std::fabs(x));
  return worst;
}

struct Gradients {
  Tensor dq, dk, dv;
};

// One backward call on owning tensors, gradients in q's dtype, NaN-poisoned before the call so that
// an element the kernel forgets to write fails the test.
Gradients run_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& d_out,
                       const Tensor& lse, const AttentionOptions& o) {
  Gradients g{testing::poisoned(q.dtype(), q.shape()), testing::poisoned(q.dtype(), k.shape()),
              testing::poisoned(q.dtype(), v.shape())};
  backward(q.view(), k.view(), v.view(), out.view(), d_out.view(), lse.view(), g.dq.view(), g.dk.view(), g.dv.view(), o);
  return g;
}

// The float64 reference gradients on float64 copies of the inputs (its out and lse arguments are
// the reference forward's; it recomputes everything anyway).
Gradients reference_gradients(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& d_out,
                              const AttentionOptions& options) {
  const AttentionOptions o = with_kernel(options, Kernel::reference);
  const Tensor q64 = wide(q), k64 = wide(k), v64 = wide(v);
  const ForwardResult fwd = testing::run_forward(q64, k64, v64, o);
  return run_backward(q64, k64, v64, fwd.out, wide(d_out), fwd.lse, o);
}

// out and lse of the fast forward, on the default target.
ForwardResult fast_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options) {
  return testing::run_forward(q, k, v, with_kernel(options, Kernel::fast), q.dtype());
}

// For the record, printed at the end of the run: the worst fast/naive RMS error ratio, and the
// comparison that came closest to the limit (the fraction of 2 × naive + floor it used).
struct WorstComparison {
  double value = 0;
  std::string where;
};
struct BackwardAccuracyRecord : ::testing::Environment {
  static inline WorstComparison ratio, fraction;
  static inline std::int64_t comparisons = 0;
  static void add(const char* gradient, double fast, double naive, double floor) {
    ++comparisons;
    auto note = [&](WorstComparison& worst, double value) {
      if (value <= worst.value) return;
      const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
      worst = {value, std::string(test->test_suite_name()) + "." + test->name() + " " + gradient + " on " +
                          target_name(active_target())};
    };
    if (naive > floor) note(ratio, fast / naive);
    note(fraction, fast / (2 * naive + floor));
  }
  void TearDown() override {
    std::printf("[ note ] backward accuracy rule: %lld comparisons; worst RMS error ratio fast / naive f32 = %.3f (%s); "
                "closest to the limit: %.2f of it (%s)\n",
                static_cast<long long>(comparisons), ratio.value, ratio.where.c_str(), fraction.value,
                fraction.where.c_str());
  }
};
[[maybe_unused]] const auto* const kAccuracyRecord = ::testing::AddGlobalTestEnvironment(new BackwardAccuracyRecord);

// Errors of one gradient tensor against the reference; `naive` and `fast` are in the storage dtype.
struct GradientError {
  double fast, naive, floor;
};
GradientError gradient_error(const Tensor& fast, const Tensor& naive, const Tensor& exact) {
  return {testing::rms_diff(wide(fast), exact), testing::rms_diff(wide(naive), exact),
          kFloor * std::max(1.0, max_abs(exact))};
}

// The accuracy rule for one input, on every target: each gradient against the float64 reference,
// compared with the naive float32 backward's error on the same (possibly rounded) inputs, out and lse.
// Each target's backward is given that target's own forward, as in use: lse carries the forward's
// rounding of the logits, which the backward's recomputation of them cancels only when both ran the
// same sums. (With one forward for all targets, a large logit's rounding difference between two
// targets, ~2⁻²⁴·|s|, became an error of the weights that the naive kernel, summing like the scalar
// target, did not have when the forward ran there.)
void expect_accurate(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& d_out,
                     const AttentionOptions& options) {
  const Gradients exact = reference_gradients(q, k, v, d_out, options);
  auto stored = [&](const Tensor& t) { return Tensor::converted(t.view(), q.dtype()); };  // rounded like the kernel's
  auto expect_naive_sane = [](const char* name, const Tensor& naive_grad, const Tensor& exact_grad) {
    EXPECT_LE(testing::rms_diff(wide(naive_grad), exact_grad), kNaiveSanity * std::max(1.0, max_abs(exact_grad)))
        << "the naive f32 " << name << " is itself far from the reference";
  };
  auto expect_rule = [](const char* name, const Tensor& fast_grad, const Tensor& naive_grad, const Tensor& exact_grad) {
    const GradientError e = gradient_error(fast_grad, naive_grad, exact_grad);
    EXPECT_LE(e.fast, 2 * e.naive + e.floor) << name << " RMS errors: fast " << e.fast << ", naive f32 " << e.naive;
    BackwardAccuracyRecord::add(name, e.fast, e.naive, e.floor);
  };
  for_each_target([&](Target target) {
    const ForwardResult fwd = fast_forward(q, k, v, options);
    // The bf16-dot targets round dropout(P) and dS to bf16 when the inputs are bf16: their naive
    // kernel does the same.
    const bool round_bf16 = q.dtype() == DType::bf16 && target_uses_bf16_dot(target);
    const NaiveGradients g = testing::naive_f32_backward(q, k, v, fwd.out, d_out, fwd.lse, options, round_bf16);
    const Gradients naive{stored(g.dq), stored(g.dk), stored(g.dv)};
    expect_naive_sane("dq", naive.dq, exact.dq);
    expect_naive_sane("dk", naive.dk, exact.dk);
    expect_naive_sane("dv", naive.dv, exact.dv);
    const Gradients fast = run_backward(q, k, v, fwd.out, d_out, fwd.lse, with_kernel(options, kKernelUnderTest));
    expect_rule("dq", fast.dq, naive.dq, exact.dq);
    expect_rule("dk", fast.dk, naive.dk, exact.dk);
    expect_rule("dv", fast.dv, naive.dv, exact.dv);
  });
}

struct Shape {
  std::int64_t B, H, Hkv, n, m, d, dv;
};
void PrintTo(const Shape& s, std::ostream* os) {
  *os << "B=" << s.B << " H=" << s.H << " Hkv=" << s.Hkv << " n=" << s.n << " m=" << s.m << " d=" << s.d << " dv=" << s.dv;
}

struct Inputs {
  Tensor q, k, v, d_out;
};
Inputs random_inputs(const Shape& s, DType dtype, Distribution dist, std::uint64_t salt) {
  Rng rng(salt);
  Inputs in;
  in.q = random_tensor(rng, {s.B, s.H, s.n, s.d}, dtype, dist);
  in.k = random_tensor(rng, {s.B, s.Hkv, s.m, s.d}, dtype, dist);
  in.v = random_tensor(rng, {s.B, s.Hkv, s.m, s.dv}, dtype);
  in.d_out = random_tensor(rng, {s.B, s.H, s.n, s.dv}, dtype);
  return in;
}

void expect_accurate_on(const Shape& s, const AttentionOptions& o, DType dtype = DType::f32,
                        Distribution dist = Distribution::gaussian, std::uint64_t salt = 0) {
  const Inputs in = random_inputs(s, dtype, dist, salt);
  expect_accurate(in.q, in.k, in.v, in.d_out, o);
}

// ---- sizes: head dimensions, odd sequence lengths, GQA and MQA ----

class FastBackwardShapes : public ::testing::TestWithParam<Shape> {};

TEST_P(FastBackwardShapes, MeetsTheAccuracyRule) {
  ATTNKIT_TRACE_SEED();
  expect_accurate_on(GetParam(), {}, DType::f32, Distribution::gaussian, 1);
}

INSTANTIATE_TEST_SUITE_P(
    HeadDims, FastBackwardShapes,
    ::testing::Values(Shape{1, 1, 1, 7, 33, 1, 1}, Shape{1, 2, 2, 33, 7, 3, 3}, Shape{2, 2, 1, 1, 257, 16, 16},
                      Shape{1, 1, 1, 33, 257, 64, 64}, Shape{1, 1, 1, 33, 33, 80, 80}, Shape{1, 1, 1, 7, 257, 128, 128},
                      Shape{2, 3, 3, 33, 257, 64, 24}));  // batch 2, d_v ≠ d_k

INSTANTIATE_TEST_SUITE_P(
    SequenceLengths, FastBackwardShapes,
    ::testing::Values(Shape{2, 4, 2, 1, 7, 64, 64},  // n = 1 per head; 8 rows, so the RMS is not one row's luck
                      Shape{1, 1, 1, 257, 7, 16, 16}, Shape{1, 1, 1, 257, 257, 32, 32},
                      Shape{1, 1, 1, 300, 1000, 32, 32},
                      Shape{2, 4, 2, 33, 257, 32, 48},   // GQA, d_v > d_k
                      Shape{2, 4, 1, 100, 300, 16, 8}));  // MQA

// As FastForward.DropoutProbabilityJustAboveAUniformStillDropsItsKey: the backward's dropout
// multipliers must drop the key whose uniform lies just below p, as the reference does.
TEST(FastBackward, DropoutProbabilityJustAboveAUniformStillDropsItsKey) {
  ATTNKIT_TRACE_SEED();
  const Shape shape{1, 2, 1, 5, 37, 16, 16};
  AttentionOptions o;
  o.seed = 11;
  ASSERT_NO_FATAL_FAILURE(testing::set_dropout_just_above_a_uniform(o, shape.H, shape.n, shape.m));
  expect_accurate_on(shape, o, DType::f32, Distribution::gaussian, 5);
}

// One key (m = 1): P = 1, so dv = Σ dO over the rows, and dq = dk = 0 exactly, by cancellation:
// dS = P · (dP − D) with dP = dO · v and D = dO · out = dO · v. The naive kernel sums D and dP in the
// same float order, so they round alike and it gets exactly 0; the fast kernel sums D in double and
// keeps dP's float32 rounding, ~1e-7 · |dO · v|. A ratio to zero means nothing, so dq and dk are
// bounded directly, well above that rounding and far below any wrong term.
// dv = Σ P · dO with P = exp(s − lse) = 1 in exact arithmetic, but the backward recomputes s = scale ·
// q · k in its own summation order, so s − lse is off by up to a rounding of |s| and P by ~(1 + |s|)
// · 2⁻²⁴ (the naive kernel's 0 is again equal rounding, not a better answer). So dv is held to the
// usual rule plus that recomputation's share: 4 · 2⁻²⁴ · (1 + max |s|) · RMS(Σ |dO|), where for one
// key lse = s. A missing row or a wrong P is orders of magnitude larger.
TEST(FastBackward, OneKeyGivesZeroScoreGradients) {
  ATTNKIT_TRACE_SEED();
  for (const Shape& s : {Shape{1, 1, 1, 1, 1, 64, 64}, Shape{2, 4, 2, 7, 1, 16, 16}}) {
    SCOPED_TRACE(::testing::PrintToString(s));
    const Inputs in = random_inputs(s, DType::f32, Distribution::gaussian, 2);
    const ForwardResult fwd = fast_forward(in.q, in.k, in.v, {});
    const Gradients exact = reference_gradients(in.q, in.k, in.v, in.d_out, {});
    const NaiveGradients naive = testing::naive_f32_backward(in.q, in.k, in.v, fwd.out, in.d_out, fwd.lse, {});
    Tensor abs_d_out = wide(in.d_out);
    for (std::int64_t i = 0; i < abs_d_out.numel(); ++i) abs_d_out.data<double>()[i] = std::fabs(abs_d_out.data<double>()[i]);
    const Tensor abs_dv_sum = reference_gradients(in.q, in.k, in.v, abs_d_out, {}).dv;  // Σ |dO| per key element
    for_each_target([&](Target) {
      const Gradients fast = run_backward(in.q, in.k, in.v, fwd.out, in.d_out, fwd.lse, with_kernel({}, kKernelUnderTest));
      EXPECT_LE(max_abs(fast.dq), 1e-5);  // |dO · v| <= ~30 here, and scale · |k| <= ~1.5
      EXPECT_LE(max_abs(fast.dk), 1e-5);
      const GradientError e = gradient_error(fast.dv, naive.dv, exact.dv);
      const double recompute = 4 * 0x1p-24 * (1 + max_abs(fwd.lse)) * rms(abs_dv_sum);
      EXPECT_LE(e.fast, 2 * e.naive + e.floor + recompute)
          << "dv RMS errors: fast " << e.fast << ", naive f32 " << e.naive << "; recomputation allowance " << recompute;
    });
  }
}

// ---- options, alone and together, on odd sizes ----

const float kSlopes[] = {0.5f, 0.25f, 0.125f, 0.0625f};
const float kSinks[] = {1.5f, -2.0f, 0.25f, 6.0f};  // one per query head; 6 takes most of a row

// Masks and key lengths for [B = 2, Hq = 4, n, m], made per test (options refer to them).
struct Masks {
  Tensor keep_over_heads;      // bool [1, 4, n, m]: broadcast over batch
  Tensor keep_rank2;           // bool [n, m]: broadcast over batch and heads
  Tensor additive_per_batch;   // f32 [2, 1, n, m] with some −inf: broadcast over heads
  std::int64_t key_lengths[2];  // m and 3m/8
};

struct OptionCase {
  std::string name;
  std::function<void(AttentionOptions&, const Masks&)> set;
  std::int64_t n = 37, m = 257;
};
void PrintTo(const OptionCase& c, std::ostream* os) { *os << c.name << " n=" << c.n << " m=" << c.m; }

class FastBackwardOptions : public ::testing::TestWithParam<OptionCase> {
 protected:
  void run(DType dtype, Distribution dist) {
    ATTNKIT_TRACE_SEED();
    const OptionCase& c = GetParam();
    Rng rng(7);
    masks_.keep_over_heads = Tensor(DType::boolean, {1, 4, c.n, c.m});
    bool* keep = masks_.keep_over_heads.data<bool>();
    for (std::int64_t i = 0; i < masks_.keep_over_heads.numel(); ++i) keep[i] = rng.uniform() < 0.7;
    masks_.keep_rank2 = Tensor(DType::boolean, {c.n, c.m});
    bool* keep_rank2 = masks_.keep_rank2.data<bool>();
    for (std::int64_t i = 0; i < masks_.keep_rank2.numel(); ++i) keep_rank2[i] = rng.uniform() < 0.8;
    masks_.additive_per_batch = random_tensor(rng, {2, 1, c.n, c.m}, DType::f32);
    float* additive = masks_.additive_per_batch.data<float>();
    for (std::int64_t i = 0; i < masks_.additive_per_batch.numel(); i += 5) additive[i] = -INFINITY;
    masks_.key_lengths[0] = c.m;
    masks_.key_lengths[1] = c.m * 3 / 8;
    AttentionOptions o;
    c.set(o, masks_);
    expect_accurate_on(Shape{2, 4, 2, c.n, c.m, 40, 24}, o, dtype, dist, 11);
  }
  Masks masks_;
};

TEST_P(FastBackwardOptions, Float32Gaussian) { run(DType::f32, Distribution::gaussian); }
TEST_P(FastBackwardOptions, Float32WithOutliers) { run(DType::f32, Distribution::with_outliers); }
TEST_P(FastBackwardOptions, BFloat16) { run(DType::bf16, Distribution::gaussian); }
TEST_P(FastBackwardOptions, Float16) { run(DType::f16, Distribution::gaussian); }

using Set = std::function<void(AttentionOptions&, const Masks&)>;
const Set kEverything = [](AttentionOptions& o, const Masks& masks) {
  o.scale = 0.2;
  o.causal = Causal::bottom_right;
  o.window = {120, 40};
  o.mask = masks.additive_per_batch.view();
  o.key_lengths = masks.key_lengths;
  o.alibi_slopes = kSlopes;
  o.softcap = 3.0;
  o.sinks = kSinks;
  o.dropout_p = 0.2;
  o.seed = 3;
};

INSTANTIATE_TEST_SUITE_P(
    EveryOption, FastBackwardOptions,
    ::testing::Values(
        OptionCase{"plain", [](AttentionOptions&, const Masks&) {}},
        OptionCase{"scale", [](AttentionOptions& o, const Masks&) { o.scale = 0.3; }},
        OptionCase{"causal_top_left", [](AttentionOptions& o, const Masks&) { o.causal = Causal::top_left; }},
        OptionCase{"causal_top_left_more_queries", [](AttentionOptions& o, const Masks&) { o.causal = Causal::top_left; },
                   257, 37},
        OptionCase{"causal_bottom_right", [](AttentionOptions& o, const Masks&) { o.causal = Causal::bottom_right; }},
        OptionCase{"causal_bottom_right_more_queries",  // the first 220 rows see no key
                   [](AttentionOptions& o, const Masks&) { o.causal = Causal::bottom_right; }, 257, 37},
        OptionCase{"window", [](AttentionOptions& o, const Masks&) { o.window = {7, 3}; }},
        OptionCase{"window_causal",
                   [](AttentionOptions& o, const Masks&) {
                     o.window = {100, 0};
                     o.causal = Causal::bottom_right;
                   }},
        OptionCase{"bool_mask", [](AttentionOptions& o, const Masks& masks) { o.mask = masks.keep_over_heads.view(); }},
        OptionCase{"bool_mask_rank2", [](AttentionOptions& o, const Masks& masks) { o.mask = masks.keep_rank2.view(); }},
        OptionCase{"additive_mask",
                   [](AttentionOptions& o, const Masks& masks) { o.mask = masks.additive_per_batch.view(); }},
        OptionCase{"key_lengths", [](AttentionOptions& o, const Masks& masks) { o.key_lengths = masks.key_lengths; }},
        OptionCase{"alibi", [](AttentionOptions& o, const Masks&) { o.alibi_slopes = kSlopes; }},
        OptionCase{"sinks", [](AttentionOptions& o, const Masks&) { o.sinks = kSinks; }},
        OptionCase{"softcap", [](AttentionOptions& o, const Masks&) { o.softcap = 2.0; }},
        OptionCase{"softcap_large", [](AttentionOptions& o, const Masks&) { o.softcap = 50.0; }},  // tanh near 0
        OptionCase{"dropout",
                   [](AttentionOptions& o, const Masks&) {
                     o.dropout_p = 0.2;
                     o.seed = 99;
                   }},
        OptionCase{"everything", kEverything},
        OptionCase{"everything_bool_mask_top_left",
                   [](AttentionOptions& o, const Masks& masks) {
                     kEverything(o, masks);
                     o.causal = Causal::top_left;
                     o.mask = masks.keep_over_heads.view();
                   }},
        OptionCase{"everything_more_queries", kEverything, 257, 37}),
    [](const ::testing::TestParamInfo<OptionCase>& info) { return info.param.name; });

// ---- logits in the hundreds to thousands ----

// Rows are nearly one-hot. Two float32 effects set the errors of dq and dk, and neither kernel wins
// both: the rounding of logits near 1e3 (~1e-4), which the fast kernel inherits from the forward
// (through lse) and the naive kernel makes itself; and the cancellation in dS = P · (dP − D) of a
// one-hot row, where the naive kernel's D and dP, summed in the same float order, round alike (the
// fast kernel sums D in double). Per input, the ratio of the two errors ranged from 0.05 to 15. So, as
// in the forward's ±1e4 test, the rule applies to the median ratio over nine inputs, and every
// input's error must stay within 4× the largest naive error.
TEST(FastBackward, LargeLogitsMedianRule) {
  ATTNKIT_TRACE_SEED();
  constexpr int kInputs = 9;
  const std::pair<const char*, std::function<void(AttentionOptions&)>> cases[] = {
      {"plain", [](AttentionOptions&) {}},
      {"causal_alibi_dropout",
       [](AttentionOptions& o) {
         o.causal = Causal::bottom_right;
         o.alibi_slopes = std::span<const float>(kSlopes, 2);
         o.dropout_p = 0.2;
         o.seed = 21;
       }}};
  for (const auto& [name, set] : cases) {
    SCOPED_TRACE(name);
    AttentionOptions o;
    set(o);
    struct Case {
      Inputs in;
      Gradients exact;
    };
    std::vector<Case> inputs;
    for (int input = 0; input < kInputs; ++input) {
      const std::uint64_t salt = 30 + static_cast<std::uint64_t>(input);
      Case c{random_inputs(Shape{1, 2, 1, 100, 300, 16, 8}, DType::f32, Distribution::large, salt), {}};
      c.exact = reference_gradients(c.in.q, c.in.k, c.in.v, c.in.d_out, o);
      inputs.push_back(std::move(c));
    }
    for_each_target([&](Target) {
      std::vector<GradientError> errors[3];  // dq, dk, dv
      for (const Case& c : inputs) {
        // The target's own forward, as expect_accurate says why.
        const ForwardResult fwd = fast_forward(c.in.q, c.in.k, c.in.v, o);
        const NaiveGradients naive = testing::naive_f32_backward(c.in.q, c.in.k, c.in.v, fwd.out, c.in.d_out, fwd.lse, o);
        const Gradients fast =
            run_backward(c.in.q, c.in.k, c.in.v, fwd.out, c.in.d_out, fwd.lse, with_kernel(o, kKernelUnderTest));
        errors[0].push_back(gradient_error(fast.dq, naive.dq, c.exact.dq));
        errors[1].push_back(gradient_error(fast.dk, naive.dk, c.exact.dk));
        errors[2].push_back(gradient_error(fast.dv, naive.dv, c.exact.dv));
      }
      const char* names[] = {"dq", "dk", "dv"};
      for (int t = 0; t < 3; ++t) {
        std::vector<double> ratios;
        double worst_naive = 0;
        for (const GradientError& e : errors[t]) {
          ratios.push_back((e.fast + e.floor) / (e.naive + e.floor));
          worst_naive = std::max(worst_naive, e.naive);
        }
        std::sort(ratios.begin(), ratios.end());
        EXPECT_LE(ratios[kInputs / 2], 2.0)
            << names[t] << ": median RMS error ratio fast / naive f32 over " << kInputs << " inputs";
        for (const GradientError& e : errors[t]) {
          EXPECT_LE(e.fast, 4 * worst_naive + e.floor) << names[t] << ": an input far off";
        }
      }
    });
  }
}

// ---- the fast path against finite differences of the float64 reference forward ----

// L = Σ out ∘ G. The inputs are float32 values, so the float64 reference forward sees exactly what the
// fast kernels see; its central differences with step 1e-4 are exact to ~1e-9 (truncation ~ step²,
// rounding ~ 1e-16 / step). The fast backward computes in float32, within 2e-6 · (1 + |gradient|)
// here: the tolerance, 2e-5 · (1 + |gradient|), leaves ten times that and still sees any wrong term
// of the derivative (a missing softcap factor, a dropped mask, a wrong dropout scale are O(1) errors).
struct FiniteDifferenceCase {
  std::string name;
  std::function<void(AttentionOptions&)> set;
  std::int64_t n = 5, m = 7;
};
void PrintTo(const FiniteDifferenceCase& c, std::ostream* os) { *os << c.name << " n=" << c.n << " m=" << c.m; }

class FastBackwardFiniteDifferences : public ::testing::TestWithParam<FiniteDifferenceCase> {};

float kAdditiveSmall[5 * 7];  // [n, m] additive mask for the "everything" case

TEST_P(FastBackwardFiniteDifferences, MatchTheFastGradients) {
  ATTNKIT_TRACE_SEED();
  const FiniteDifferenceCase& c = GetParam();
  constexpr double kStep = 1e-4, kTolerance = 2e-5;
  Rng rng(200);
  for (float& a : kAdditiveSmall) a = static_cast<float>(rng.normal());
  kAdditiveSmall[3] = -INFINITY;
  const std::int64_t B = 1, H = 2, Hkv = 1, d = 3, dv = 4;  // two query heads share the KV head: dk, dv sum
  const Tensor q = random_tensor(rng, {B, H, c.n, d}, DType::f32), k = random_tensor(rng, {B, Hkv, c.m, d}, DType::f32),
               v = random_tensor(rng, {B, Hkv, c.m, dv}, DType::f32), g = random_tensor(rng, {B, H, c.n, dv}, DType::f32);
  AttentionOptions o;
  c.set(o);

  // Central differences of L in every element of q, k and v, in float64.
  Tensor q64 = wide(q), k64 = wide(k), v64 = wide(v);
  const Tensor g64 = wide(g);
  auto loss = [&] {
    const Tensor out = testing::run_forward(q64, k64, v64, with_kernel(o, Kernel::reference)).out;
    double sum = 0;
    for (std::int64_t i = 0; i < out.numel(); ++i) sum += out.data<double>()[i] * g64.data<double>()[i];
    return sum;
  };
  auto numeric = [&](Tensor& input) {
    Tensor grad(DType::f64, input.shape());
    double* x = input.data<double>();
    for (std::int64_t i = 0; i < input.numel(); ++i) {
      const double saved = x[i];
      x[i] = saved + kStep;
      const double up = loss();
      x[i] = saved - kStep;
      const double down = loss();
      x[i] = saved;
      grad.data<double>()[i] = (up - down) / (2 * kStep);
    }
    return grad;
  };
  const Tensor numeric_grads[] = {numeric(q64), numeric(k64), numeric(v64)};

  for_each_target([&](Target) {
    const ForwardResult fwd = testing::run_forward(q, k, v, with_kernel(o, Kernel::fast), DType::f32);
    const Gradients fast = run_backward(q, k, v, fwd.out, g, fwd.lse, with_kernel(o, kKernelUnderTest));
    const std::pair<const char*, const Tensor*> analytic[] = {{"dq", &fast.dq}, {"dk", &fast.dk}, {"dv", &fast.dv}};
    for (int t = 0; t < 3; ++t) {
      for (std::int64_t i = 0; i < numeric_grads[t].numel(); ++i) {
        const double want = numeric_grads[t].data<double>()[i];
        ASSERT_NEAR(testing::value(*analytic[t].second, i), want, kTolerance * (1 + std::fabs(want)))
            << analytic[t].first << " element " << i;
      }
    }
  });
}

const float kSlopesSmall[] = {0.7f, 0.3f};
const std::int64_t kLengthSmall[] = {6};

INSTANTIATE_TEST_SUITE_P(
    Options, FastBackwardFiniteDifferences,
    ::testing::Values(
        FiniteDifferenceCase{"plain", [](AttentionOptions&) {}},
        FiniteDifferenceCase{"scale", [](AttentionOptions& o) { o.scale = 1.3; }},
        FiniteDifferenceCase{"softcap", [](AttentionOptions& o) { o.softcap = 0.8; }},
        FiniteDifferenceCase{"causal_alibi",
                             [](AttentionOptions& o) {
                               o.causal = Causal::bottom_right;
                               o.alibi_slopes = kSlopesSmall;
                             }},
        FiniteDifferenceCase{"causal_bottom_right_more_queries",  // rows 0..4 see no key
                             [](AttentionOptions& o) { o.causal = Causal::bottom_right; }, 9, 4},
        FiniteDifferenceCase{"dropout",
                             [](AttentionOptions& o) {
                               o.dropout_p = 0.3;
                               o.seed = 77;
                             }},
        FiniteDifferenceCase{"everything",
                             [](AttentionOptions& o) {
                               o.scale = 0.9;
                               o.causal = Causal::bottom_right;
                               o.window = {3, -1};
                               o.mask = ConstTensorView::contiguous(kAdditiveSmall, DType::f32, {5, 7});
                               o.key_lengths = kLengthSmall;
                               o.alibi_slopes = kSlopesSmall;
                               o.softcap = 2.0;
                               o.dropout_p = 0.2;
                               o.seed = 5;
                             }}),
    [](const ::testing::TestParamInfo<FiniteDifferenceCase>& info) { return info.param.name; });

// ---- determinism ----

// dQ sums contributions from many key blocks: the kernel must add them in an order that does not
// depend on how work is spread over threads. Run under ThreadSanitizer in CI (the name matters).
TEST(FastBackward, ResultsAreBitwiseIdenticalForAnyThreadCount) {
  ATTNKIT_TRACE_SEED();
  for (std::int64_t n : {3, 150}) {  // 1500 keys: several key chunks per KV head, each with its dQ part
    SCOPED_TRACE("n = " + std::to_string(n));
    const Inputs in = random_inputs(Shape{1, 4, 2, n, 1500, 16, 16}, DType::f32, Distribution::gaussian, 40);
    AttentionOptions o = with_kernel({}, kKernelUnderTest);
    o.causal = Causal::bottom_right;
    o.dropout_p = 0.1;
    o.seed = 8;
    const ForwardResult fwd = fast_forward(in.q, in.k, in.v, o);
    for_each_target([&](Target) {
      set_num_threads(1);
      const Gradients one = run_backward(in.q, in.k, in.v, fwd.out, in.d_out, fwd.lse, o);
      for (int threads : {1, 2, 3, 5, 7}) {  // 1 again: a repeated call
        set_num_threads(threads);
        const Gradients many = run_backward(in.q, in.k, in.v, fwd.out, in.d_out, fwd.lse, o);
        EXPECT_TRUE(testing::bitwise_equal(one.dq, many.dq)) << "dq, threads " << threads;
        EXPECT_TRUE(testing::bitwise_equal(one.dk, many.dk)) << "dk, threads " << threads;
        EXPECT_TRUE(testing::bitwise_equal(one.dv, many.dv)) << "dv, threads " << threads;
      }
    });
  }
  set_num_threads(0);
}

// ---- guarantees ----

// Gradient rows that must be exactly zero, and the accuracy rule on the rest.
// ∂L/∂sinks (L = Σ dO ∘ out): the float64 reference's against central differences of its own forward,
// and the fast kernel's on every target against the reference's, within float32 rounding of the
// rows' terms e^(sink − lse)·(dO · out). Rows that see no key (batch 1's key length 0), dropout and
// GQA included; with no batch the gradients are zeros.
TEST(FastBackward, SinkGradientsMatchTheReferenceAndFiniteDifferences) {
  ATTNKIT_TRACE_SEED();
  const Shape shape{2, 4, 2, 37, 257, 40, 24};
  const Inputs in = random_inputs(shape, DType::f32, Distribution::gaussian, 5);
  const std::int64_t lengths[] = {257, 0};
  AttentionOptions o;
  o.causal = Causal::bottom_right;
  o.key_lengths = lengths;
  o.dropout_p = 0.1;
  o.seed = 17;
  o.sinks = kSinks;
  auto sink_gradients = [&](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& d_out, const ForwardResult& fwd,
                            const AttentionOptions& options) {
    Gradients g{testing::poisoned(q.dtype(), q.shape()), testing::poisoned(q.dtype(), k.shape()),
                testing::poisoned(q.dtype(), v.shape())};
    Tensor d_sinks = testing::poisoned(DType::f32, {4});
    backward(q.view(), k.view(), v.view(), fwd.out.view(), d_out.view(), fwd.lse.view(), g.dq.view(), g.dk.view(), g.dv.view(),
             options, BackwardExtras{d_sinks.view()});
    return d_sinks;
  };
  const AttentionOptions ref = with_kernel(o, Kernel::reference);
  const Tensor q64 = wide(in.q), k64 = wide(in.k), v64 = wide(in.v), d_out64 = wide(in.d_out);
  const ForwardResult exact_fwd = testing::run_forward(q64, k64, v64, ref);
  const Tensor exact = sink_gradients(q64, k64, v64, d_out64, exact_fwd, ref);
  // Central differences of L over each sink, in float64 (the sinks are float: steps of 2⁻⁸ are exact).
  for (std::int64_t h = 0; h < 4; ++h) {
    auto loss = [&](float step) {
      float moved[4] = {kSinks[0], kSinks[1], kSinks[2], kSinks[3]};
      moved[h] += step;
      AttentionOptions shifted = ref;
      shifted.sinks = moved;
      const ForwardResult r = testing::run_forward(q64, k64, v64, shifted);
      double l = 0;
      for (std::int64_t x = 0; x < r.out.numel(); ++x) l += r.out.data<double>()[x] * d_out64.data<double>()[x];
      return l;
    };
    const double step = 0x1p-8, numeric = (loss(step) - loss(-step)) / (2 * step);
    const double got = exact.data<float>()[h];
    EXPECT_NEAR(got, numeric, 1e-4 * std::max(1.0, std::fabs(numeric))) << "head " << h;
    EXPECT_NE(got, 0.0) << "head " << h;
  }
  // The fast kernel's, from its own forward on each target.
  double scale[4] = {};  // Σ over head h's rows of |e^(sink − lse) · (dO · out)|, in float64
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t h = 0; h < 4; ++h)
      for (std::int64_t i = 0; i < shape.n; ++i) {
        double delta = 0;
        for (std::int64_t c = 0; c < shape.dv; ++c) delta += testing::at4(d_out64, b, h, i, c) * testing::at4(exact_fwd.out, b, h, i, c);
        scale[h] += std::fabs(std::exp(kSinks[h] - exact_fwd.lse.data<float>()[(b * 4 + h) * shape.n + i]) * delta);
      }
  for_each_target([&](Target) {
    const ForwardResult fwd = fast_forward(in.q, in.k, in.v, o);
    const Tensor fast = sink_gradients(in.q, in.k, in.v, in.d_out, fwd, with_kernel(o, Kernel::fast));
    for (std::int64_t h = 0; h < 4; ++h) {
      EXPECT_NEAR(fast.data<float>()[h], exact.data<float>()[h], 1e-5 * scale[h] + 1e-7) << "head " << h;
    }
  });
  // No batch entries: every sink's gradient is 0, written by both kernels.
  AttentionOptions no_batch = o;
  no_batch.key_lengths = {};
  for (Kernel kernel : {Kernel::fast, Kernel::reference}) {
    const Tensor q0(DType::f32, {0, 4, 3, 8}), k0(DType::f32, {0, 2, 5, 8}), v0(DType::f32, {0, 2, 5, 6});
    const ForwardResult fwd = testing::run_forward(q0, k0, v0, with_kernel(no_batch, kernel), DType::f32);
    const Tensor g = sink_gradients(q0, k0, v0, Tensor(DType::f32, {0, 4, 3, 6}), fwd, with_kernel(no_batch, kernel));
    for (double x : testing::values(g)) EXPECT_EQ(x, 0.0) << kernel_name(kernel);
  }
}

TEST(FastBackward, RowsWithNoVisibleKeyGiveZeroGradients) {
  ATTNKIT_TRACE_SEED();
  const std::int64_t B = 2, H = 2, n = 12, m = 9, d = 5, dv = 3;
  const Inputs in = random_inputs(Shape{B, H, 1, n, m, d, dv}, DType::f32, Distribution::gaussian, 50);
  auto dq_row_is_zero = [&](const Tensor& dq, std::int64_t b, std::int64_t h, std::int64_t i) {
    for (std::int64_t c = 0; c < d; ++c)
      if (testing::value(dq, ((b * H + h) * n + i) * d + c) != 0.0) return false;
    return true;
  };
  auto key_row_is_zero = [&](const Tensor& t, std::int64_t width, std::int64_t b, std::int64_t j) {  // one KV head
    for (std::int64_t c = 0; c < width; ++c)
      if (testing::value(t, (b * m + j) * width + c) != 0.0) return false;
    return true;
  };

  // Bottom-right with n > m: rows 0..2 see no key. key_lengths 0: batch 0 sees no key at all.
  const std::int64_t lengths[] = {0, 9};
  AttentionOptions causal;
  causal.causal = Causal::bottom_right;
  causal.key_lengths = lengths;
  // Keys i − 1 and i: rows 10 and 11 have none.
  AttentionOptions window;
  window.window = {1, 0};
  // A keep-mask with row 4 and key 6 all false.
  bool keep[n * m];
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < m; ++j) keep[i * m + j] = i != 4 && j != 6;
  AttentionOptions masked;
  masked.mask = ConstTensorView::contiguous(keep, DType::boolean, {n, m});

  for (const AttentionOptions* o : {&causal, &window, &masked}) {
    expect_accurate(in.q, in.k, in.v, in.d_out, *o);
    const ForwardResult fwd = fast_forward(in.q, in.k, in.v, *o);
    for_each_target([&](Target) {
      const Gradients g = run_backward(in.q, in.k, in.v, fwd.out, in.d_out, fwd.lse, with_kernel(*o, kKernelUnderTest));
      EXPECT_FALSE(testing::has_nan(g.dq) || testing::has_nan(g.dk) || testing::has_nan(g.dv));
      for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t h = 0; h < H; ++h)
          for (std::int64_t i = 0; i < n; ++i) {
            const bool sees_nothing = o == &causal ? (b == 0 || i < 3) : o == &window ? i > m : i == 4;
            if (!sees_nothing) continue;
            EXPECT_TRUE(dq_row_is_zero(g.dq, b, h, i)) << "dq row b=" << b << " h=" << h << " i=" << i;
          }
      for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t j = 0; j < m; ++j) {
          const bool never_seen = o == &causal ? b == 0 : o == &masked && j == 6;
          if (!never_seen) continue;
          EXPECT_TRUE(key_row_is_zero(g.dk, d, b, j)) << "dk row b=" << b << " j=" << j;
          EXPECT_TRUE(key_row_is_zero(g.dv, dv, b, j)) << "dv row b=" << b << " j=" << j;
        }
    });
  }
}

TEST(FastBackward, ZeroSizesWriteWhatTheyShould) {
  ATTNKIT_TRACE_SEED();
  Rng rng(60);
  const AttentionOptions o = with_kernel({}, kKernelUnderTest);
  // Gradients of the call with these shapes; out and lse from the fast forward.
  using Sizes = std::vector<std::int64_t>;
  auto gradients = [&](Sizes q_shape, Sizes k_shape, Sizes v_shape) {
    const Tensor q = random_tensor(rng, q_shape, DType::f32), k = random_tensor(rng, k_shape, DType::f32),
                 v = random_tensor(rng, v_shape, DType::f32);
    const Tensor g = random_tensor(rng, {q_shape[0], q_shape[1], q_shape[2], v_shape[3]}, DType::f32);
    const ForwardResult fwd = fast_forward(q, k, v, {});
    return run_backward(q, k, v, fwd.out, g, fwd.lse, o);
  };
  auto all_zero = [](const Tensor& t) {
    for (double x : testing::values(t))
      if (x != 0.0) return false;
    return true;
  };
  for_each_target([&](Target) {
    const Gradients no_queries = gradients({1, 2, 0, 4}, {1, 2, 3, 4}, {1, 2, 3, 5});  // n = 0: nothing depends on k, v
    EXPECT_TRUE(all_zero(no_queries.dk) && all_zero(no_queries.dv));
    const Gradients no_keys = gradients({1, 2, 3, 4}, {1, 2, 0, 4}, {1, 2, 0, 5});  // m = 0: no row sees a key
    EXPECT_TRUE(all_zero(no_keys.dq));
    gradients({0, 2, 3, 4}, {0, 2, 3, 4}, {0, 2, 3, 5});                              // B = 0
    const Gradients no_heads = gradients({1, 0, 3, 4}, {1, 2, 3, 4}, {1, 2, 3, 5});   // Hq = 0, Hkv = 2
    EXPECT_TRUE(all_zero(no_heads.dk) && all_zero(no_heads.dv));
    const Gradients no_values = gradients({1, 2, 3, 4}, {1, 1, 5, 4}, {1, 1, 5, 0});  // d_v = 0: out is empty, L too
    EXPECT_TRUE(all_zero(no_values.dq) && all_zero(no_values.dk));
    // d_k = 0: every logit is 0, so dq and dk are empty and dv is the uniform average of dO.
    const Tensor q = Tensor(DType::f32, {1, 2, 3, 0}), k = Tensor(DType::f32, {1, 1, 5, 0});
    const Tensor v = random_tensor(rng, {1, 1, 5, 2}, DType::f32), g = random_tensor(rng, {1, 2, 3, 2}, DType::f32);
    const ForwardResult fwd = fast_forward(q, k, v, {});
    const Gradients no_key_dim = run_backward(q, k, v, fwd.out, g, fwd.lse, o);
    EXPECT_LE(testing::max_abs_diff(wide(no_key_dim.dv), reference_gradients(q, k, v, g, {}).dv), 1e-6);
  });
}

// Q, dO, out, dQ in [B, S, H, D] memory; K with stride 2 in its last dimension; lse as [B, S, H]:
// the same values as contiguous tensors.
TEST(FastBackward, StridedLayoutsMatchContiguous) {
  ATTNKIT_TRACE_SEED();
  const std::int64_t B = 2, S = 45, H = 4, Hkv = 2, D = 24, Dv = 16;
  const Inputs in = random_inputs(Shape{B, H, Hkv, S, S, D, Dv}, DType::f32, Distribution::gaussian, 70);
  AttentionOptions o = with_kernel({}, kKernelUnderTest);
  o.causal = Causal::top_left;
  o.dropout_p = 0.1;
  const ForwardResult fwd = fast_forward(in.q, in.k, in.v, o);

  // t [b, h, s, c] contiguous → the same values in [b, s, h, c] memory.
  auto sequence_major = [](const Tensor& t) {
    const auto& s = t.shape();
    Tensor out(t.dtype(), {s[0], s[2], s[1], s[3]});
    for (std::int64_t b = 0; b < s[0]; ++b)
      for (std::int64_t h = 0; h < s[1]; ++h)
        for (std::int64_t i = 0; i < s[2]; ++i)
          for (std::int64_t c = 0; c < s[3]; ++c)
            out.data<float>()[((b * s[2] + i) * s[1] + h) * s[3] + c] =
                t.data<float>()[((b * s[1] + h) * s[2] + i) * s[3] + c];
    return out;
  };
  const Tensor q_bshd = sequence_major(in.q), v_bshd = sequence_major(in.v), out_bshd = sequence_major(fwd.out),
               d_out_bshd = sequence_major(in.d_out);
  // k: every other element of a [B, S, Hkv, 2D] tensor.
  Tensor k_wide(DType::f32, {B, S, Hkv, 2 * D});
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t g = 0; g < Hkv; ++g)
      for (std::int64_t j = 0; j < S; ++j)
        for (std::int64_t c = 0; c < D; ++c)
          k_wide.data<float>()[((b * S + j) * Hkv + g) * 2 * D + 2 * c] =
              in.k.data<float>()[((b * Hkv + g) * S + j) * D + c];
  const ConstTensorView k(k_wide.raw(), DType::f32, {B, Hkv, S, D}, {S * Hkv * 2 * D, 2 * D, Hkv * 2 * D, 2});
  Tensor lse_bsh(DType::f32, {B, S, H});
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t i = 0; i < S; ++i)
        lse_bsh.data<float>()[(b * S + i) * H + h] = fwd.lse.data<float>()[(b * H + h) * S + i];
  auto as_bhsd = [](const Tensor& t) { return t.view().permuted({0, 2, 1, 3}); };

  for_each_target([&](Target) {
    const Gradients contiguous = run_backward(in.q, in.k, in.v, fwd.out, in.d_out, fwd.lse, o);
    Tensor dq_bshd = testing::poisoned(DType::f32, {B, S, H, D}), dk_bshd = testing::poisoned(DType::f32, {B, S, Hkv, D}),
           dv_bshd = testing::poisoned(DType::f32, {B, S, Hkv, Dv});
    backward(as_bhsd(q_bshd), k, as_bhsd(v_bshd), as_bhsd(out_bshd), as_bhsd(d_out_bshd), lse_bsh.view().permuted({0, 2, 1}),
             dq_bshd.view().permuted({0, 2, 1, 3}), dk_bshd.view().permuted({0, 2, 1, 3}),
             dv_bshd.view().permuted({0, 2, 1, 3}), o);
    // Same arithmetic on the same values: equal up to a last-bit difference a layout-specific path may make.
    auto expect_same = [](const char* name, const Tensor& bshd, const Tensor& want) {
      const Tensor got = Tensor::converted(bshd.view().permuted({0, 2, 1, 3}), DType::f32);
      EXPECT_LE(testing::max_abs_diff(got, want), 1e-6 * std::max(1.0, max_abs(want))) << name;
    };
    expect_same("dq", dq_bshd, contiguous.dq);
    expect_same("dk", dk_bshd, contiguous.dk);
    expect_same("dv", dv_bshd, contiguous.dv);
  });
}

// NaN in an input reaches exactly the gradient elements it reaches in the float64 reference, and a
// NaN where the key or row is masked reaches none. Setup: bottom-right causal (key j visible to rows
// i with j <= i + 260), key_lengths 290 (keys 290..299 never visible), row 3 masked out entirely,
// dropout (a dropped key is still visible: NaN · 0 is NaN), two query heads on one KV head.
TEST(FastBackward, NanReachesExactlyTheGradientsThatDependOnIt) {
  ATTNKIT_TRACE_SEED();
  const std::int64_t H = 2, n = 40, m = 300, d = 8, dv = 4;
  const Inputs clean = random_inputs(Shape{1, H, 1, n, m, d, dv}, DType::f32, Distribution::gaussian, 80);
  const std::int64_t lengths[] = {290};
  static bool keep[n * m];
  for (std::int64_t i = 0; i < n * m; ++i) keep[i] = i / m != 3;
  AttentionOptions o;
  o.causal = Causal::bottom_right;
  o.key_lengths = lengths;
  o.mask = ConstTensorView::contiguous(keep, DType::boolean, {n, m});
  o.dropout_p = 0.3;
  o.seed = 4;

  struct Case {
    const char* what;
    int tensor;  // 0 q, 1 k, 2 v, 3 d_out
    std::int64_t flat;
    bool reaches_a_gradient;  // a check on the setup: the reference must agree
  };
  const Case cases[] = {
      {"q row 5 of head 0", 0, 5 * d + 2, true},
      {"q row 3 (sees no key)", 0, (n + 3) * d + 1, false},
      {"k row 280 (seen by rows >= 20)", 1, 280 * d + 1, true},
      {"k row 295 (never seen)", 1, 295 * d, false},
      {"v row 270, column 3 (not seen by rows < 10)", 2, 270 * dv + 3, true},
      {"v row 299 (never seen)", 2, 299 * dv + 1, false},
      {"d_out row 2 of head 1, column 2 (keys 263.. not seen)", 3, (n + 2) * dv + 2, true},
      {"d_out row 3 (sees no key)", 3, 3 * dv, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Inputs in = clean;
    Tensor* poisoned[] = {&in.q, &in.k, &in.v, &in.d_out};
    poisoned[c.tensor]->data<float>()[c.flat] = NAN;
    const Gradients expected = reference_gradients(in.q, in.k, in.v, in.d_out, o);
    ASSERT_EQ(testing::has_nan(expected.dq) || testing::has_nan(expected.dk) || testing::has_nan(expected.dv),
              c.reaches_a_gradient);
    const ForwardResult fwd = fast_forward(in.q, in.k, in.v, o);
    for_each_target([&](Target) {
      const Gradients got = run_backward(in.q, in.k, in.v, fwd.out, in.d_out, fwd.lse, with_kernel(o, kKernelUnderTest));
      const std::pair<const char*, std::pair<const Tensor*, const Tensor*>> pairs[] = {
          {"dq", {&got.dq, &expected.dq}}, {"dk", {&got.dk, &expected.dk}}, {"dv", {&got.dv, &expected.dv}}};
      for (const auto& [name, tensors] : pairs) {
        for (std::int64_t i = 0; i < tensors.first->numel(); ++i) {
          ASSERT_EQ(std::isnan(testing::value(*tensors.first, i)), std::isnan(testing::value(*tensors.second, i)))
              << name << " element " << i;
        }
      }
    });
  }
}

// ---- kernel choice ----

TEST(FastBackward, Float64IsUnsupported) {
  Rng rng(90);
  const Tensor q = random_tensor(rng, {1, 1, 3, 4}), k = random_tensor(rng, {1, 1, 5, 4});
  const Tensor v = random_tensor(rng, {1, 1, 5, 2}), g = random_tensor(rng, {1, 1, 3, 2});
  const ForwardResult fwd = testing::run_forward(q, k, v, {});
  Gradients grads{testing::poisoned(DType::f64, q.shape()), testing::poisoned(DType::f64, k.shape()),
                  testing::poisoned(DType::f64, v.shape())};
  try {
    backward(q.view(), k.view(), v.view(), fwd.out.view(), g.view(), fwd.lse.view(), grads.dq.view(), grads.dk.view(),
             grads.dv.view(), with_kernel({}, Kernel::fast));
    ADD_FAILURE() << "Kernel::fast took float64 inputs";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported) << e.what();
  }
  // Nothing is written when the call raises.
  for (double x : testing::values(grads.dq)) EXPECT_TRUE(std::isnan(x));
  // Kernel::automatic takes float64 to the reference.
  const Gradients automatic = run_backward(q, k, v, fwd.out, g, fwd.lse, {});
  EXPECT_TRUE(testing::bitwise_equal(automatic.dq, reference_gradients(q, k, v, g, {}).dq));
}

TEST(FastBackward, AutomaticRunsTheFastKernelForNarrowFloats) {
  ATTNKIT_TRACE_SEED();
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    const Inputs in = random_inputs(Shape{1, 2, 1, 9, 70, 8, 8}, dtype, Distribution::gaussian, 91);
    const ForwardResult fwd = fast_forward(in.q, in.k, in.v, {});
    EXPECT_EQ(resolve_kernel(Kernel::automatic, dtype), Kernel::fast);
    for_each_target([&](Target) {
      const Gradients automatic = run_backward(in.q, in.k, in.v, fwd.out, in.d_out, fwd.lse, {});
      const Gradients fast = run_backward(in.q, in.k, in.v, fwd.out, in.d_out, fwd.lse, with_kernel({}, Kernel::fast));
      EXPECT_TRUE(testing::bitwise_equal(automatic.dq, fast.dq) && testing::bitwise_equal(automatic.dk, fast.dk) &&
                  testing::bitwise_equal(automatic.dv, fast.dv));
    });
  }
}

}  // namespace
}  // namespace attnkit
