// Shared test helpers: seeded random tensors with named distributions, NaN poisoning, comparisons,
// and a one-call forward on owning tensors.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "attnkit/attnkit.hpp"

namespace attnkit::testing {

// A fresh seed per test run (ATTNKIT_TEST_SEED pins it); tests SCOPED_TRACE it so failures print it.
inline std::uint64_t test_seed() {
  static const std::uint64_t seed = [] {
    if (const char* env = std::getenv("ATTNKIT_TEST_SEED")) return std::uint64_t{std::strtoull(env, nullptr, 10)};
    return (std::uint64_t{std::random_device{}()} << 32) ^ std::uint64_t{std::random_device{}()};
  }();
  return seed;
}
#define ATTNKIT_TRACE_SEED() SCOPED_TRACE("seed " + std::to_string(::attnkit::testing::test_seed()) + \
                                          " (rerun with ATTNKIT_TEST_SEED=<seed>)")

enum class Distribution {
  gaussian,       // N(0, 1)
  with_outliers,  // N(0, 1) with ~2% of entries multiplied by 30
  large,          // N(0, 1) · 40: logits in the hundreds to thousands
};

class Rng {
 public:
  explicit Rng(std::uint64_t salt = 0) : engine_(test_seed() ^ (salt * 0x9E3779B97F4A7C15ull)) {}
  // A generator that does not depend on the run's seed, for a statistical rule that holds for most
  // sets of inputs but not all (LogitsNearTenThousand says why): those inputs are the same each run.
  static Rng fixed(std::uint64_t seed) {
    Rng rng;
    rng.engine_.seed(seed);
    return rng;
  }
  double normal() { return normal_(engine_); }
  double uniform() { return uniform_(engine_); }
  std::int64_t integer(std::int64_t lo, std::int64_t hi) {  // inclusive
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(engine_);
  }
  double sample(Distribution d) {
    switch (d) {
      case Distribution::gaussian: return normal();
      case Distribution::with_outliers: return uniform() < 0.02 ? 30.0 * normal() : normal();
      case Distribution::large: return 40.0 * normal();
    }
    return 0.0;
  }

 private:
  std::mt19937_64 engine_;
  std::normal_distribution<double> normal_{0.0, 1.0};
  std::uniform_real_distribution<double> uniform_{0.0, 1.0};
};

inline Tensor random_tensor(Rng& rng, std::vector<std::int64_t> shape, DType dtype = DType::f64,
                            Distribution dist = Distribution::gaussian) {
  Tensor t(DType::f64, std::move(shape));
  double* p = t.data<double>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = rng.sample(dist);
  return dtype == DType::f64 ? std::move(t) : Tensor::converted(t.view(), dtype);
}

// Fills every element with NaN, so an output element the kernel forgets to write fails the test.
inline void poison(Tensor& t) {
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    store_from_double(static_cast<std::byte*>(t.raw()) + i * static_cast<std::int64_t>(dtype_size(t.dtype())),
                      t.dtype(), std::numeric_limits<double>::quiet_NaN());
  }
}

inline Tensor poisoned(DType dtype, std::vector<std::int64_t> shape) {
  Tensor t(dtype, std::move(shape));
  poison(t);
  return t;
}

inline double value(const Tensor& t, std::int64_t flat) {
  return load_as_double(static_cast<const std::byte*>(t.raw()) + flat * static_cast<std::int64_t>(dtype_size(t.dtype())),
                        t.dtype());
}

inline std::vector<double> values(const Tensor& t) {
  std::vector<double> out(static_cast<std::size_t>(t.numel()));
  for (std::int64_t i = 0; i < t.numel(); ++i) out[static_cast<std::size_t>(i)] = value(t, i);
  return out;
}

inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  double worst = 0.0;
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    const double x = value(a, i), y = value(b, i);
    if (std::isnan(x) != std::isnan(y)) return std::numeric_limits<double>::infinity();
    if (!std::isnan(x) && x != y) worst = std::max(worst, std::fabs(x - y));
  }
  return worst;
}

// Root-mean-square difference over the elements that are numbers in both, or infinity if the NaN
// patterns differ. The accuracy rule compares RMS errors: a maximum is decided by the rounding of
// one or two logits and flips between kernels by chance.
inline double rms_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  double sum = 0;
  std::int64_t count = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    const double x = value(a, i), y = value(b, i);
    if (std::isnan(x) != std::isnan(y)) return std::numeric_limits<double>::infinity();
    if (std::isnan(x)) continue;
    sum += (x - y) * (x - y);
    ++count;
  }
  return count == 0 ? 0.0 : std::sqrt(sum / static_cast<double>(count));
}

inline bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

inline bool has_nan(const Tensor& t) {
  for (std::int64_t i = 0; i < t.numel(); ++i)
    if (std::isnan(value(t, i))) return true;
  return false;
}

// Each tensor's bytes, to check that a refused call left its outputs exactly as they were.
inline std::vector<std::vector<unsigned char>> bytes_of(std::initializer_list<const Tensor*> tensors) {
  std::vector<std::vector<unsigned char>> bytes;
  for (const Tensor* t : tensors) {
    const auto* raw = static_cast<const unsigned char*>(t->raw());
    bytes.emplace_back(raw, raw + t->nbytes());
  }
  return bytes;
}

// Whether every element is NaN: a poisoned output that a refused call left alone (has_nan would
// also pass on a partial write).
inline bool all_nan(const Tensor& t) {
  for (std::int64_t i = 0; i < t.numel(); ++i)
    if (!std::isnan(value(t, i))) return false;
  return true;
}

// out, lse and probs of one forward call on owning tensors; outputs are NaN-poisoned before the call.
struct ForwardResult {
  Tensor out, lse, probs;
};

inline ForwardResult run_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options = {},
                                 DType out_dtype = DType::f64) {
  const auto& qs = q.shape();
  const std::int64_t B = qs[0], H = qs[1], n = qs[2], m = k.shape()[2], dv = v.shape()[3];
  ForwardResult r{poisoned(out_dtype, {B, H, n, dv}), poisoned(DType::f32, {B, H, n}), poisoned(DType::f64, {B, H, n, m})};
  forward(q.view(), k.view(), v.view(), r.out.view(), options, ForwardExtras{r.lse.view(), r.probs.view()});
  return r;
}

// Element access on a rank-4 contiguous f64 tensor.
inline double& at4(Tensor& t, std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d) {
  const auto& s = t.shape();
  return t.data<double>()[((a * s[1] + b) * s[2] + c) * s[3] + d];
}
inline double at4(const Tensor& t, std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d) {
  const auto& s = t.shape();
  return t.data<double>()[((a * s[1] + b) * s[2] + c) * s[3] + d];
}

}  // namespace attnkit::testing
