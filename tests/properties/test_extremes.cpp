// Inputs at the edges of the number types, on every kernel of the matrix (kernel_matrix.hpp):
//
//   1. window sides up to INT64_MAX mean exactly what docs/semantics.md says: the kernel with the
//      window equals the kernel with the same keys hidden by an explicit keep-mask, computed here
//      in 128-bit integers (so the test's own arithmetic cannot overflow);
//   2. values so large that Σ p·v overflows float32 although O, a weighted mean, is finite: O comes
//      out finite and matches the reference, at several key counts (and through split decoding);
//   3. a row whose every logit lies below float32's range is never reported as empty: the fast
//      kernel gives NaN, the reference the exact O with a finite lse; lse = −inf only where no key
//      is visible.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "properties/comparison.hpp"
#include "properties/kernel_matrix.hpp"
#include "properties/random_problems.hpp"
#include "support/testing.hpp"

namespace attnkit::properties {
namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

// The sides the window is tried with for m keys: small, around m, and near the top of int64.
std::vector<int64_t> window_sides(int64_t m) {
  return {-1, 0, 1, m - 1, m, m + 1, int64_t{1} << 31, int64_t{1} << 62, kInt64Max - 1, kInt64Max};
}

// The keep-mask [B, Hq, n, m] of the window (left, right) under the case's causal alignment:
// i' − left ≤ j ≤ i' + right in 128-bit arithmetic, a side of −1 unbounded.
Tensor window_as_mask(const Case& c, int64_t left, int64_t right) {
  const Sizes& s = c.size;
  Tensor mask(DType::boolean, {s.B, s.Hq, s.n, s.m});
  bool* keep = mask.data<bool>();
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.Hq; ++h)
      for (int64_t i = 0; i < s.n; ++i)
        for (int64_t j = 0; j < s.m; ++j) {
          const __int128 position = c.settings.causal == Causal::bottom_right ? __int128{i} + s.m - s.n : __int128{i};
          *keep++ = (left < 0 || __int128{j} >= position - left) && (right < 0 || __int128{j} <= position + right);
        }
  return mask;
}

TEST_P(Properties, WindowSidesUpToInt64MaxEqualTheKeysTheyKeep) {
  ATTNKIT_TRACE_SEED();
  OptionSpace space;
  space.window = space.keep_mask = space.additive_mask = false;  // the window is set here; no other mask
  for_each_case(variant(), space, 50, [&](const Case& c, Rng& rng) {
    const std::vector<int64_t> sides = window_sides(c.size.m);
    auto any_side = [&] { return sides[static_cast<std::size_t>(rng.integer(0, static_cast<int64_t>(sides.size()) - 1))]; };
    std::vector<std::pair<int64_t, int64_t>> windows;
    for (int64_t side : sides) {  // every side on the left and on the right, beside -1 and a random one
      windows.push_back({side, -1});
      windows.push_back({-1, side});
      windows.push_back({side, any_side()});
      windows.push_back({any_side(), side});
    }
    const double logits = logit_scale(c, explicit_mask(c)), values = value_scale(c);
    for (const auto& [left, right] : windows) {
      SCOPED_TRACE("window=(" + std::to_string(left) + "," + std::to_string(right) + ")");
      Case windowed = c;
      windowed.settings.window = {left, right};
      Case masked = c;
      masked.mask = window_as_mask(c, left, right);
      const Outcome got = run(variant(), windowed), want = run(variant(), masked);
      if (!expect_close("out", variant(), got.out, want.out, output_tolerance(variant(), values, logits), values) ||
          !expect_close("lse", variant(), got.lse, want.lse, lse_tolerance(variant(), logits))) {
        return;
      }
    }
  });
}

// q = 0, so every weight of a row is equal, and every value of V is `value`: O = value exactly,
// whatever the number of keys, while the unnormalised Σ p·v is m · value.
struct UniformCase {
  Case c;
  double value;
};
UniformCase uniform_weights(const Variant& variant, int64_t n, int64_t m, int64_t d, double value) {
  UniformCase u{Case{}, value};
  Case& c = u.c;
  c.size = {1, 2, 1, n, m, d, d};
  c.q = Tensor(DType::f64, {1, 2, n, d});
  c.k = Tensor(DType::f64, {1, 1, m, d});
  c.v = Tensor(DType::f64, {1, 1, m, d});
  std::fill_n(c.q.data<double>(), c.q.numel(), 0.0);
  std::fill_n(c.k.data<double>(), c.k.numel(), 1.0);
  // Rounded once to the variant's dtype, so that it is exactly what the kernel reads.
  Tensor one(DType::f64, {1});
  one.data<double>()[0] = value;
  u.value = Tensor::converted(Tensor::converted(one.view(), variant.dtype).view(), DType::f64).data<double>()[0];
  std::fill_n(c.v.data<double>(), c.v.numel(), u.value);
  return u;
}

TEST_P(Properties, LargeFiniteValuesGiveAFiniteOutputAtAnyKeyCount) {
  ATTNKIT_TRACE_SEED();
  // |V| near the dtype's largest finite value, over key counts from a few (one block) to past the
  // split-decoding threshold; bf16 and f16 take their own largest values.
  const double largest = variant().dtype == DType::f16 ? 6.0e4 : 1.0e38;
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{40}}) {
    for (int64_t m : {int64_t{4}, int64_t{64}, int64_t{1031}, int64_t{4099}}) {
      for (double sign : {1.0, -1.0}) {
        SCOPED_TRACE("n=" + std::to_string(n) + " m=" + std::to_string(m) + " v=" + std::to_string(sign * largest));
        const UniformCase u = uniform_weights(variant(), n, m, 19, sign * largest);
        const Outcome got = run(variant(), u.c);
        // Every weight is 1, or e^−headroom once an overflowing item is redone: bf16 products round
        // that weight (and not the sum it is divided by) to bf16, f16 tile products to f16.
        const DType rounding = variant().fast() ? testing::forward_p_rounding(variant().target, variant().dtype,
                                                                              variant().dtype, variant().dtype)
                                                : DType::f32;
        // Otherwise a float32 sum of m terms: within m roundings.
        const double relative = rounding == DType::bf16  ? 2 * kBf16WeightRounding
                                : rounding == DType::f16 ? 2 * kF16WeightRounding + static_cast<double>(m) * kF32Epsilon
                                                         : 1e-6 + static_cast<double>(m) * kF32Epsilon;
        const double* out = got.out.data<double>();
        for (int64_t e = 0; e < got.out.numel(); ++e) {
          ASSERT_TRUE(std::isfinite(out[e])) << "element " << e << " is " << out[e];
          ASSERT_LE(std::fabs(out[e] - u.value), relative * std::fabs(u.value)) << "element " << e;
        }
        const float* lse = got.lse.data<float>();
        for (int64_t e = 0; e < got.lse.numel(); ++e) ASSERT_NEAR(lse[e], std::log(static_cast<double>(m)), 1e-5);
      }
    }
  }
}

TEST_P(Properties, LargeValuesWithDropoutAndRandomWeightsMatchTheReference) {
  ATTNKIT_TRACE_SEED();
  if (variant().dtype == DType::f16) GTEST_SKIP() << "f16 values cannot overflow a float32 sum (65504 · keys)";
  OptionSpace space;
  space.dropout = true;
  for_each_case(variant(), space, 51, [&](const Case& c, Rng&) {
    // V scaled so that max|V| is 2^125: Σ p·v of m keys overflows float32 for m beyond a few.
    Case big = c;
    // (value_scale: max|V| / (1 − p), which bounds |O|; a power of two keeps V exact in every dtype)
    const double power = std::exp2(std::floor(std::log2(std::ldexp(1.0, 125) / value_scale(c))));
    double* v = big.v.data<double>();
    for (int64_t e = 0; e < big.v.numel(); ++e) v[e] *= power;
    Variant reference{Kernel::reference, Target::scalar, variant().dtype};
    const Outcome got = run(variant(), big), want = run(reference, big);
    const double logits = logit_scale(c, explicit_mask(c)), values = value_scale(big);
    expect_close("out", variant(), got.out, want.out, output_tolerance(variant(), values, logits), values);
  });
}

TEST_P(Properties, ARowWhoseLogitsFallBelowFloat32IsNeverReportedEmpty) {
  ATTNKIT_TRACE_SEED();
  // q·k = −2^100 · 2^100 · d: far below float32's range; the second half of the keys is masked, and
  // the last query row sees none at all (a truly empty row beside the overflowed ones).
  if (variant().dtype == DType::f16) GTEST_SKIP() << "2^100 is beyond f16's range";
  const int64_t n = 3, m = 10, d = 4;
  Case c;
  c.size = {1, 1, 1, n, m, d, d};
  c.q = Tensor(DType::f64, {1, 1, n, d});
  c.k = Tensor(DType::f64, {1, 1, m, d});
  c.v = Tensor(DType::f64, {1, 1, m, d});
  std::fill_n(c.q.data<double>(), c.q.numel(), 0x1p100);
  for (int64_t e = 0; e < c.k.numel(); ++e) c.k.data<double>()[e] = -0x1p100 * (1 + (e / d) % 2);
  for (int64_t e = 0; e < c.v.numel(); ++e) c.v.data<double>()[e] = static_cast<double>(e / d);
  c.settings.scale = 1.0;
  Tensor keep(DType::boolean, {1, 1, n, m});
  for (int64_t e = 0; e < keep.numel(); ++e) keep.data<bool>()[e] = e / m < n - 1 && e % m < m / 2;
  c.mask = keep;
  const Outcome got = run(variant(), c);
  const float* lse = got.lse.data<float>();
  const double* out = got.out.data<double>();
  for (int64_t i = 0; i < n - 1; ++i) {
    SCOPED_TRACE("row " + std::to_string(i));
    EXPECT_NE(lse[i], -std::numeric_limits<float>::infinity()) << "a row that sees keys reported as empty";
    if (variant().fast()) {
      EXPECT_TRUE(std::isnan(lse[i])) << lse[i];
      for (int64_t c0 = 0; c0 < d; ++c0) EXPECT_TRUE(std::isnan(out[i * d + c0])) << out[i * d + c0];
    } else {  // the reference: the exact softmax, lse saturated. Keys 0, 2 and 4 share the largest
              // logit (−2^202; the odd keys' are 2^202 lower): O is the mean of their values, 2.
      EXPECT_EQ(lse[i], std::numeric_limits<float>::lowest());
      for (int64_t c0 = 0; c0 < d; ++c0) EXPECT_EQ(out[i * d + c0], 2.0);
    }
  }
  EXPECT_EQ(lse[n - 1], -std::numeric_limits<float>::infinity());  // the empty row stays empty
  for (int64_t c0 = 0; c0 < d; ++c0) EXPECT_EQ(out[(n - 1) * d + c0], 0.0);
}

// The backward on the uniform problem with V = value everywhere and dO = 1: dP = dO·v and
// D = dO·O are both d·value (past float32's range for value = 2^123, d = 64: 2^129), while the
// gradients are exact and small (a power of two keeps every sum of equal terms exact): dS = P ∘ (dP − D) = 0, so dq = dk = 0, and dv = Σ_i p_ij dO_i = n/m.
TEST_P(Properties, BackwardGradientsStayFiniteWhenTheirIntermediatesWouldOverflow) {
  ATTNKIT_TRACE_SEED();
  if (variant().dtype == DType::f16) GTEST_SKIP() << "f16 values cannot make d·|dO|·|v| overflow float32";
  const int64_t n = 9, m = 13, d = 64;
  const UniformCase u = uniform_weights(variant(), n, m, d, 0x1p123);
  const Sizes& s = u.c.size;
  const Stored q = store(u.c.q, variant().dtype, Layout::contiguous), k = store(u.c.k, variant().dtype, Layout::contiguous),
               v = store(u.c.v, variant().dtype, Layout::contiguous);
  Tensor out(variant().dtype, {s.B, s.Hq, n, d}), lse(DType::f32, {s.B, s.Hq, n});
  AttentionOptions options;
  options.kernel = variant().kernel;
  forward(q.view, k.view, v.view, out.view(), options, {lse.view(), std::nullopt});
  Tensor ones(DType::f64, {s.B, s.Hq, n, d});
  std::fill_n(ones.data<double>(), ones.numel(), 1.0);
  const Stored d_out = store(ones, variant().dtype, Layout::contiguous);
  Stored dq = poisoned_output({s.B, s.Hq, n, d}, variant().dtype, Layout::contiguous),
         dk = poisoned_output({s.B, s.Hkv, m, d}, variant().dtype, Layout::contiguous),
         dv = poisoned_output({s.B, s.Hkv, m, d}, variant().dtype, Layout::contiguous);
  backward(q.view, k.view, v.view, out.view(), d_out.view, lse.view(), dq.view, dk.view, dv.view, options);
  const Tensor got_dq = Tensor::converted(dq.view, DType::f64), got_dk = Tensor::converted(dk.view, DType::f64),
               got_dv = Tensor::converted(dv.view, DType::f64);
  // dP − D is 0 up to the roundings of O = Σ p·v (the reference's p = 1/13 is not exact): relative
  // to dP's own size, d · 2^123.
  const double rounding = (variant().fast() ? 1e-5 : 1e-13) * d * 0x1p123;
  for (int64_t e = 0; e < got_dq.numel(); ++e) ASSERT_LE(std::fabs(got_dq.data<double>()[e]), rounding) << "dq element " << e;
  for (int64_t e = 0; e < got_dk.numel(); ++e) ASSERT_LE(std::fabs(got_dk.data<double>()[e]), rounding) << "dk element " << e;
  // dv_j = Σ over the group's 2 query heads and n queries of 1/m
  const double want_dv = 2.0 * n / m;
  for (int64_t e = 0; e < got_dv.numel(); ++e) ASSERT_NEAR(got_dv.data<double>()[e], want_dv, 1e-2 * want_dv) << "dv element " << e;
}

}  // namespace
}  // namespace attnkit::properties
