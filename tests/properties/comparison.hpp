// Comparing the two sides of a property: tolerances derived from the dtype, element-by-element checks,
// and a log of the largest deviation seen per property and kernel, printed at the end of the run.
//
// The two sides of a property run the same kernel on differently arranged inputs, so they differ only
// by rounding:
//   * float64 reference: sums in a different order, ~1e-16 per operation: 1e-12 relative.
//   * fast kernel (computes in float32): float32 sums in a different order (kF32SumOrder, relative
//     to max|V|), plus logits that may round differently on the two sides (ALiBi added natively in
//     two steps versus folded into a mask added in one; a dot product summed in another order on a
//     decode tile): each weight then moves by up to a few float32 roundings of the magnitude L of
//     what is rounded (logit_scale in random_problems.hpp); plus, for bf16 and f16 storage, one unit
//     in the last place of the output dtype (two float32 results a hair apart may round to
//     neighbours).
//   * a bf16-dot target on bf16 inputs rounds each weight to bf16 before P·V, relative to the running
//     maximum of the keys seen so far, which depends on the order and blocking of the keys: each
//     side's output moves by at most 2⁻⁹ of max|V| (kBf16WeightRounding per side).
//   * lse is float32 for every kernel: each side's value is rounded to float32 once, so even the
//     reference's two sides may differ by one float32 ulp.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "attnkit/attnkit.hpp"
#include "properties/kernel_matrix.hpp"
#include "support/naive_f32.hpp"
#include "support/testing.hpp"

namespace attnkit::properties {

inline constexpr double kReferenceRelative = 1e-12;  // float64 sums in another order
inline constexpr double kF32SumOrder = 1e-5;         // float32 sums in another order, relative to max|V|
inline constexpr double kLogitRoundings = 4;         // float32 roundings of a logit that may differ
inline constexpr double kF32Epsilon = 0x1p-24;       // unit roundoff of float32
inline constexpr double kBf16WeightRounding = 0x1p-9; // unit roundoff of bf16, on each weight
inline constexpr double kF16WeightRounding = 0x1p-11; // unit roundoff of f16, on each weight (f16 tiles)

// The spacing of `dtype`'s numbers at |x| (one unit in the last place), subnormals included.
inline double ulp(double x, DType dtype) {
  int mantissa_bits = 52, min_exponent = -1022;
  switch (dtype) {
    case DType::f32: mantissa_bits = 23, min_exponent = -126; break;
    case DType::bf16: mantissa_bits = 7, min_exponent = -126; break;
    case DType::f16: mantissa_bits = 10, min_exponent = -14; break;
    default: break;
  }
  const int exponent = x == 0 || !std::isfinite(x) ? min_exponent : std::max(std::ilogb(x), min_exponent);
  return std::ldexp(1.0, exponent - mantissa_bits);
}

// Allowed |a − b| for one pair of elements: an absolute part plus `ulps` units in the last place of
// `dtype` at max(|a|, |b|).
struct Tolerance {
  double absolute = 0;
  double ulps = 0;
  DType dtype = DType::f64;
  double allowed(double a, double b) const { return absolute + ulps * ulp(std::max(std::fabs(a), std::fabs(b)), dtype); }
};

// O of one kernel on two arrangements: `value_scale` bounds |O| (max|V|, over 1 − p with dropout) and
// `logit_scale` the magnitude of what is rounded in computing the logits that carry weight.
inline Tolerance output_tolerance(const Variant& v, double value_scale, double logit_scale) {
  const double logits = std::max(1.0, logit_scale);
  if (!v.fast()) return {kReferenceRelative * value_scale * logits, 0, DType::f64};
  const DType rounding = testing::forward_p_rounding(v.target, v.dtype, v.dtype, v.dtype);
  const double weights = rounding == DType::bf16 ? 2 * kBf16WeightRounding : rounding == DType::f16 ? 2 * kF16WeightRounding : 0;
  return {value_scale * (kF32SumOrder + kLogitRoundings * kF32Epsilon * logits + weights), 1, v.dtype};
}

// lse (float32) of one kernel on two arrangements: each side rounded to float32 once, plus, for the
// fast kernel, a relative change of the float32 sum of weights (an absolute change of its log) and the
// logits' rounding.
inline Tolerance lse_tolerance(const Variant& v, double logit_scale) {
  const double logits = std::max(1.0, logit_scale);
  if (!v.fast()) return {kReferenceRelative * logits, 1, DType::f32};
  return {kF32SumOrder + kLogitRoundings * kF32Epsilon * logits, 2, DType::f32};
}

// The largest deviation per (property, kernel, quantity) in this run, as a fraction of its scale and
// of its tolerance; printed at the end, so that the tolerances can be judged against what is used.
class DeviationLog : public ::testing::Environment {
 public:
  struct Entry {
    double worst = 0;        // max |a − b| / scale
    double worst_ratio = 0;  // max |a − b| / allowed
    long long elements = 0;
    bool bitwise = true;     // every comparison was bitwise
  };
  static void add(const std::string& key, double deviation_over_scale, double ratio, long long elements, bool bitwise) {
    std::lock_guard<std::mutex> lock(mutex());
    Entry& e = entries()[key];
    e.worst = std::max(e.worst, deviation_over_scale);
    e.worst_ratio = std::max(e.worst_ratio, ratio);
    e.elements += elements;
    e.bitwise = e.bitwise && bitwise;
  }
  void TearDown() override {
    std::printf("[ note ] largest deviation per property, kernel and quantity (|a - b| / scale, and / tolerance):\n");
    for (const auto& [key, e] : entries()) {
      if (e.bitwise) {
        std::printf("[ note ]   %-72s bitwise equal (%lld elements)\n", key.c_str(), e.elements);
      } else {
        std::printf("[ note ]   %-72s %.3e  (%.3f of tolerance, %lld elements)\n", key.c_str(), e.worst, e.worst_ratio,
                    e.elements);
      }
    }
  }

 private:
  static std::map<std::string, Entry>& entries() {
    static std::map<std::string, Entry> log;
    return log;
  }
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
};

// The name of the running test (its property) and parameter, for the log's keys.
inline std::string current_property() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  if (info == nullptr) return "?";
  std::string name = info->name();
  const auto slash = name.find('/');
  return slash == std::string::npos ? name : name.substr(0, slash);
}

// got ≈ want element by element (equal shapes): a NaN anywhere fails (no input holds one, and outputs
// start as NaN), infinities must match exactly (lse = −inf for a row that sees no key), finite values
// within `tol`, plus `extra` (float64, want's shape) where an element has an allowance of its own.
// `scale` normalises the logged deviation. Returns whether every element passed.
inline bool expect_close(const std::string& what, const Variant& variant, const Tensor& got, const Tensor& want,
                         const Tolerance& tol, double scale = 1, const Tensor* extra = nullptr) {
  EXPECT_EQ(got.shape(), want.shape()) << what;
  if (got.shape() != want.shape()) return false;
  const Tensor a = Tensor::converted(got.view(), DType::f64), b = Tensor::converted(want.view(), DType::f64);
  const double* x = a.data<double>();
  const double* y = b.data<double>();
  double worst = 0, worst_ratio = 0;
  long long failures = 0, first_failure = -1;
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    bool ok;
    if (std::isnan(x[i]) || std::isnan(y[i]) || !std::isfinite(x[i]) || !std::isfinite(y[i])) {
      ok = !std::isnan(x[i]) && x[i] == y[i];
    } else {
      const double d = std::fabs(x[i] - y[i]), allowed = tol.allowed(x[i], y[i]) + (extra ? extra->data<double>()[i] : 0.0);
      worst = std::max(worst, d);
      worst_ratio = std::max(worst_ratio, allowed > 0 ? d / allowed : (d > 0 ? INFINITY : 0.0));
      ok = d <= allowed;
    }
    if (!ok && failures++ == 0) first_failure = i;
  }
  DeviationLog::add(current_property() + " " + variant_name(variant) + " " + what, worst / scale, worst_ratio, a.numel(),
                    false);
  EXPECT_EQ(failures, 0) << what << ": " << failures << " of " << a.numel() << " elements differ beyond the tolerance"
                         << " (absolute " << tol.absolute << " + " << tol.ulps << " ulp of " << dtype_name(tol.dtype)
                         << "); first at flat index " << first_failure << ": "
                         << (first_failure >= 0 ? x[first_failure] : 0.0) << " vs "
                         << (first_failure >= 0 ? y[first_failure] : 0.0) << "; worst |a - b| " << worst;
  return failures == 0;
}

// got and want hold the same bits.
inline bool expect_bitwise(const std::string& what, const Variant& variant, const Tensor& got, const Tensor& want) {
  const bool same = got.shape() == want.shape() && got.dtype() == want.dtype() &&
                    std::memcmp(got.raw(), want.raw(), got.nbytes()) == 0;
  DeviationLog::add(current_property() + " " + variant_name(variant) + " " + what, 0, 0, got.numel(), same);
  if (!same) {
    EXPECT_TRUE(same) << what << ": not bitwise equal; largest difference "
                      << ::attnkit::testing::max_abs_diff(Tensor::converted(got.view(), DType::f64),
                                                          Tensor::converted(want.view(), DType::f64));
  }
  return same;
}

}  // namespace attnkit::properties
