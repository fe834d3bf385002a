// The dispatch seam (src/dispatch/backends.hpp): a validated problem carries its resolved kernel, and every
// kernel a problem can resolve to has exactly one backend in the table.
#include <gtest/gtest.h>

#include <string>

#include "dispatch/backends.hpp"
#include "api/validate.hpp"
#include "support/testing.hpp"

namespace attnkit {
namespace {

using testing::random_tensor;
using testing::Rng;

detail::Problem validated(DType dtype, Kernel requested, const AttentionOptions& base = {}) {
  Rng rng(3);
  static Tensor q, k, v, out;  // the problem points into them
  q = random_tensor(rng, {1, 2, 3, 4}, dtype);
  k = random_tensor(rng, {1, 2, 5, 4}, dtype);
  v = random_tensor(rng, {1, 2, 5, 4}, dtype);
  out = Tensor(dtype, {1, 2, 3, 4});
  static AttentionOptions options;
  options = base;
  options.kernel = requested;
  detail::ForwardOutputs outputs;
  return detail::validate_forward(q.view(), k.view(), v.view(), out.view(), options, {}, outputs);
}

TEST(Backends, AProblemCarriesItsResolvedKernel) {
  EXPECT_EQ(validated(DType::f32, Kernel::automatic).kernel, Kernel::fast);
  EXPECT_EQ(validated(DType::bf16, Kernel::automatic).kernel, Kernel::fast);
  EXPECT_EQ(validated(DType::f64, Kernel::automatic).kernel, Kernel::reference);
  EXPECT_EQ(validated(DType::f32, Kernel::reference).kernel, Kernel::reference);
  EXPECT_EQ(validated(DType::f16, Kernel::fast).kernel, Kernel::fast);
  EXPECT_THROW(validated(DType::f64, Kernel::fast), Error) << "the fast kernel computes in float32";
}

TEST(Backends, EveryResolvedKernelHasItsOwnBackend) {
  for (Kernel kernel : {Kernel::reference, Kernel::fast}) {
    const detail::Backend& backend = detail::backend_for(kernel);
    EXPECT_EQ(backend.kernel, kernel) << kernel_name(kernel);
    EXPECT_NE(backend.forward, nullptr);
    EXPECT_NE(backend.backward, nullptr);
    EXPECT_NE(backend.forward_scratch, nullptr);
    EXPECT_NE(backend.backward_scratch, nullptr);
  }
  try {
    detail::backend_for(Kernel::automatic);
    ADD_FAILURE() << "automatic is resolved before dispatch, never dispatched";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
    EXPECT_NE(std::string(e.what()).find("automatic"), std::string::npos) << e.what();
  }
}

// run_forward on a validated problem gives what the public forward gives, bit for bit.
TEST(Backends, RunForwardIsThePublicForwardAfterValidation) {
  for (Kernel kernel : {Kernel::reference, Kernel::fast}) {
    Rng rng(5);
    const Tensor q = random_tensor(rng, {2, 4, 7, 8}, DType::f32), k = random_tensor(rng, {2, 2, 9, 8}, DType::f32),
                 v = random_tensor(rng, {2, 2, 9, 8}, DType::f32);
    AttentionOptions options;
    options.kernel = kernel;
    options.causal = Causal::bottom_right;
    Tensor want(DType::f32, {2, 4, 7, 8}), got = testing::poisoned(DType::f32, {2, 4, 7, 8});
    forward(q.view(), k.view(), v.view(), want.view(), options);
    detail::ForwardOutputs outputs;
    const detail::Problem p = detail::validate_forward(q.view(), k.view(), v.view(), got.view(), options, {}, outputs);
    detail::run_forward("test", p, outputs);
    EXPECT_TRUE(testing::bitwise_equal(got, want)) << kernel_name(kernel);
  }
}

}  // namespace
}  // namespace attnkit
