// The kernels the property tests run on: the float64 reference, and the fast kernel on every SIMD
// target this CPU supports with each storage dtype it takes. A property test is parameterised by one
// entry of this matrix; the parameter name says which ("reference_f64", "fast_avx2_bf16", ...).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "attnkit/attnkit.hpp"
#include "attnkit/targets.hpp"
#include "support/target_twins.hpp"

namespace attnkit::properties {

struct Variant {
  Kernel kernel = Kernel::reference;
  Target target = Target::scalar;  // the fast kernel's; unused by the reference
  DType dtype = DType::f64;        // of q, k, v and out
  bool fast() const { return kernel == Kernel::fast; }
};

inline std::string variant_name(const Variant& v) {
  if (!v.fast()) return "reference_" + std::string(dtype_name(v.dtype));
  return std::string("fast_") + target_name(v.target) + "_" + std::string(dtype_name(v.dtype));
}
inline std::string variant_param_name(const ::testing::TestParamInfo<Variant>& info) { return variant_name(info.param); }
inline void PrintTo(const Variant& v, std::ostream* os) { *os << variant_name(v); }

// Every target and dtype but those whose kernels another listed target already runs
// (testing::same_kernels_as: a tile target's f32 calls, an f16 tile target's bf16 calls, ...).
inline std::vector<Variant> all_variants() {
  std::vector<Variant> out = {{Kernel::reference, Target::scalar, DType::f64}};
  for (Target target : supported_targets())
    for (DType dtype : {DType::f32, DType::bf16, DType::f16})
      if (!testing::same_kernels_as(target, dtype)) out.push_back({Kernel::fast, target, dtype});
  return out;
}

// Forces the variant's target for the fast kernel while it lives; the default target afterwards.
class ScopedTarget {
 public:
  explicit ScopedTarget(const Variant& v) {
    if (v.fast()) set_target(v.target);
  }
  ~ScopedTarget() { reset_target(); }
  ScopedTarget(const ScopedTarget&) = delete;
  ScopedTarget& operator=(const ScopedTarget&) = delete;
};

// The fixture of every property test: its parameter is one kernel of the matrix, whose target is
// forced for the test's duration.
class Properties : public ::testing::TestWithParam<Variant> {
 protected:
  const Variant& variant() const { return GetParam(); }

 private:
  ScopedTarget target_{GetParam()};
};

}  // namespace attnkit::properties
