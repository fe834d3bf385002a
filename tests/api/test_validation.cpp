// Bad input: every check at the API edge raises attnkit::Error with the right code and a message that
// names the argument and the shapes; nothing is written to the outputs then.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "support/testing.hpp"

namespace attnkit {
namespace {

using testing::random_tensor;
using testing::Rng;

struct Call;
std::vector<const Call*> g_calls;  // the Calls alive, innermost last: expect_error watches its outputs

// A valid problem (B=2, Hq=4, Hkv=2, n=3, m=5, d_k=6, d_v=7) that each test breaks in one way. Its
// outputs start poisoned with NaN.
struct Call {
  Tensor q, k, v, out, lse, probs, d_out, dq, dk, dv;
  AttentionOptions options;
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;
  ~Call() { g_calls.pop_back(); }
  // Every output's bytes: a refused call must leave each exactly as it was.
  std::vector<std::vector<unsigned char>> output_bytes() const {
    return testing::bytes_of({&out, &lse, &probs, &dq, &dk, &dv});
  }
  Call() {
    g_calls.push_back(this);
    Rng rng(7);
    q = random_tensor(rng, {2, 4, 3, 6}, DType::f32);
    k = random_tensor(rng, {2, 2, 5, 6}, DType::f32);
    v = random_tensor(rng, {2, 2, 5, 7}, DType::f32);
    out = testing::poisoned(DType::f32, {2, 4, 3, 7});
    lse = testing::poisoned(DType::f32, {2, 4, 3});
    probs = testing::poisoned(DType::f32, {2, 4, 3, 5});
    d_out = random_tensor(rng, {2, 4, 3, 7}, DType::f32);
    dq = testing::poisoned(DType::f32, {2, 4, 3, 6});
    dk = testing::poisoned(DType::f32, {2, 2, 5, 6});
    dv = testing::poisoned(DType::f32, {2, 2, 5, 7});
  }
  void run_forward() { forward(q.view(), k.view(), v.view(), out.view(), options, {lse.view(), probs.view()}); }
  void run_backward() {
    backward(q.view(), k.view(), v.view(), out.view(), d_out.view(), lse.view(), dq.view(), dk.view(), dv.view(), options);
  }
};

// Runs `action`, expects an Error with `code` whose message contains every fragment, and that the
// innermost live Call's outputs (out, lse, probs, dq, dk, dv) are byte for byte as they were: a
// refused call writes nothing, not even one element.
template <class Action>
void expect_error(Action action, ErrorCode code, std::initializer_list<std::string> fragments) {
  const Call* call = g_calls.empty() ? nullptr : g_calls.back();
  const auto before = call ? call->output_bytes() : std::vector<std::vector<unsigned char>>{};
  try {
    action();
    ADD_FAILURE() << "no error raised; expected " << error_code_name(code);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const std::string& f : fragments) EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what() << "\n  missing: " << f;
    if (call) {
      const auto after = call->output_bytes();
      const char* names[] = {"out", "lse", "probs", "dq", "dk", "dv"};
      for (std::size_t t = 0; t < after.size(); ++t) {
        EXPECT_EQ(after[t], before[t]) << names[t] << " was written by a refused call: " << e.what();
      }
    }
  }
}

TEST(Validation, ValidCallSucceedsForwardAndBackward) {
  Call c;
  c.run_forward();
  EXPECT_FALSE(testing::has_nan(c.out));
  c.run_backward();
  EXPECT_FALSE(testing::has_nan(c.dq) || testing::has_nan(c.dk) || testing::has_nan(c.dv));
}

TEST(Validation, WrongRank) {
  Call c;
  Rng rng(1);
  Tensor q3 = random_tensor(rng, {4, 3, 6}, DType::f32);
  expect_error([&] { forward(q3.view(), c.k.view(), c.v.view(), c.out.view()); }, ErrorCode::invalid_shape,
               {"q:", "rank 4", "[4, 3, 6]"});
  expect_error([&] { forward(c.q.view(), c.k.view(), c.v.view(), c.lse.view()); }, ErrorCode::invalid_shape,
               {"out:", "[2, 4, 3, 7]", "[2, 4, 3]"});
  EXPECT_TRUE(testing::all_nan(c.out));  // nothing written
}

TEST(Validation, MismatchedBatchHeadsKeysAndDims) {
  Rng rng(2);
  {
    Call c;
    c.k = random_tensor(rng, {3, 2, 5, 6}, DType::f32);
    expect_error([&] { c.run_forward(); }, ErrorCode::invalid_shape, {"batch", "q [2, 4, 3, 6]", "k [3, 2, 5, 6]"});
  }
  {
    Call c;
    c.v = random_tensor(rng, {2, 1, 5, 7}, DType::f32);
    expect_error([&] { c.run_forward(); }, ErrorCode::invalid_shape, {"v:", "heads", "k [2, 2, 5, 6]"});
  }
  {
    Call c;
    c.v = random_tensor(rng, {2, 2, 4, 7}, DType::f32);
    expect_error([&] { c.run_forward(); }, ErrorCode::invalid_shape, {"v:", "4 keys", "5"});
  }
  {
    Call c;
    c.k = random_tensor(rng, {2, 2, 5, 5}, DType::f32);
    expect_error([&] { c.run_forward(); }, ErrorCode::invalid_shape, {"k:", "key dimension 5", "6"});
  }
  {
    Call c;
    c.out = Tensor(DType::f32, {2, 4, 3, 6});
    expect_error([&] { c.run_forward(); }, ErrorCode::invalid_shape, {"out:", "[2, 4, 3, 7]", "[2, 4, 3, 6]"});
  }
}

TEST(Validation, QueryHeadsMustBeAMultipleOfKeyValueHeads) {
  Rng rng(3);
  Call c;
  c.k = random_tensor(rng, {2, 3, 5, 6}, DType::f32);
  c.v = random_tensor(rng, {2, 3, 5, 7}, DType::f32);
  expect_error([&] { c.run_forward(); }, ErrorCode::invalid_shape, {"query heads 4", "key/value heads 3"});
  c.k = Tensor(DType::f32, {2, 0, 5, 6});
  c.v = Tensor(DType::f32, {2, 0, 5, 7});
  expect_error([&] { c.run_forward(); }, ErrorCode::invalid_shape, {"query heads 4", "key/value heads 0"});
}

TEST(Validation, MaskShapeAndDtype) {
  Call c;
  Tensor bad_shape(DType::boolean, {2, 4, 3, 4});
  c.options.mask = bad_shape.view();
  expect_error([&] { c.run_forward(); }, ErrorCode::invalid_shape, {"mask:", "[2, 4, 3, 4]", "broadcast", "[2, 4, 3, 5]"});
  Tensor bad_rank(DType::boolean, {4, 3, 5});
  c.options.mask = bad_rank.view();
  expect_error([&] { c.run_forward(); }, ErrorCode::invalid_shape, {"mask:", "rank 3"});
  Tensor ints(DType::i32, {3, 5});
  c.options.mask = ints.view();
  expect_error([&] { c.run_forward(); }, ErrorCode::invalid_dtype, {"mask", "i32"});
  Tensor broadcastable(DType::boolean, {1, 4, 1, 5});
  c.options.mask = broadcastable.view();
  c.run_forward();  // size-1 dimensions broadcast
}

TEST(Validation, KeyLengths) {
  Call c;
  const std::int64_t wrong_count[] = {5};
  c.options.key_lengths = wrong_count;
  expect_error([&] { c.run_forward(); }, ErrorCode::invalid_shape, {"key_lengths", "(2)", "got 1"});
  const std::int64_t negative[] = {5, -1};
  c.options.key_lengths = negative;
  expect_error([&] { c.run_forward(); }, ErrorCode::invalid_argument, {"key_lengths[1]", "-1", "0..5"});
  const std::int64_t too_long[] = {6, 5};
  c.options.key_lengths = too_long;
  expect_error([&] { c.run_forward(); }, ErrorCode::invalid_argument, {"key_lengths[0]", "6"});
}

TEST(Validation, AlibiSlopes) {
  Call c;
  const float wrong_count[] = {0.5f, 0.25f};
  c.options.alibi_slopes = wrong_count;
  expect_error([&] { c.run_forward(); }, ErrorCode::invalid_shape, {"alibi_slopes", "(4)", "got 2"});
  const float not_finite[] = {0.5f, std::numeric_limits<float>::quiet_NaN(), 0.1f, 0.1f};
  c.options.alibi_slopes = not_finite;
  expect_error([&] { c.run_forward(); }, ErrorCode::invalid_argument, {"alibi_slopes[1]", "finite"});
}

TEST(Validation, Sinks) {
  Call c;
  const float wrong_count[] = {0.5f, 0.25f, 1.0f};
  c.options.sinks = wrong_count;
  expect_error([&] { c.run_forward(); }, ErrorCode::invalid_shape, {"sinks", "one logit per query head (4)", "got 3"});
  const float not_finite[] = {0.5f, 0.25f, -std::numeric_limits<float>::infinity(), 0.1f};
  c.options.sinks = not_finite;
  expect_error([&] { c.run_forward(); }, ErrorCode::invalid_argument, {"sinks[2]", "finite", "-inf"});
}

TEST(Validation, SinkGradient) {
  Call c;
  c.run_forward();
  Tensor d_sinks = testing::poisoned(DType::f32, {4});
  auto run = [&](Tensor& gradient) {
    backward(c.q.view(), c.k.view(), c.v.view(), c.out.view(), c.d_out.view(), c.lse.view(), c.dq.view(), c.dk.view(),
             c.dv.view(), c.options, BackwardExtras{gradient.view()});
  };
  expect_error([&] { run(d_sinks); }, ErrorCode::invalid_argument, {"d_sinks", "without options.sinks"});
  const float sinks[] = {0.5f, -1.0f, 2.0f, 0.0f};
  c.options.sinks = sinks;
  c.run_forward();
  Tensor three = testing::poisoned(DType::f32, {3}), wide = testing::poisoned(DType::f64, {4});
  expect_error([&] { run(three); }, ErrorCode::invalid_shape, {"d_sinks", "[4]", "[3]"});
  expect_error([&] { run(wide); }, ErrorCode::invalid_dtype, {"d_sinks", "f32"});
  // Valid: with d_sinks every sink's gradient is written; without, the sinks are taken as constants.
  run(d_sinks);
  EXPECT_FALSE(testing::has_nan(d_sinks));
  c.run_backward();
  EXPECT_FALSE(testing::has_nan(c.dq));
}

TEST(Validation, ScalarOptions) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (double p : {-0.1, 1.0, 1.5, nan}) {
    Call c;
    c.options.dropout_p = p;
    expect_error([&] { c.run_forward(); }, ErrorCode::invalid_argument, {"dropout_p", "[0, 1)"});
  }
  for (double s : {0.0, -1.0, inf, nan}) {
    Call c;
    c.options.scale = s;
    expect_error([&] { c.run_forward(); }, ErrorCode::invalid_argument, {"scale", "> 0"});
  }
  for (double cap : {-1.0, inf, nan}) {
    Call c;
    c.options.softcap = cap;
    expect_error([&] { c.run_forward(); }, ErrorCode::invalid_argument, {"softcap", ">= 0"});
  }
  Call c;
  c.options.window = {-2, 3};
  expect_error([&] { c.run_forward(); }, ErrorCode::invalid_argument, {"window", "(-2, 3)"});
}

// A case fuzz/fuzz_validation.cpp found: softcap 1e300, if it passed validation, would become inf as
// the fast kernel's float32 and give NaN outputs (inf · tanh(0)); a huge scale does the same where
// q·k = 0. Both are refused.
TEST(Validation, Float32KernelRefusesScaleAndSoftcapOutsideFloat32) {
  for (double cap : {1e300, 1e39, 1e-300, 1e-39}) {
    Call c;
    c.options.softcap = cap;
    expect_error([&] { c.run_forward(); }, ErrorCode::invalid_argument, {"softcap", "float32", "Kernel::reference"});
    expect_error([&] { c.run_backward(); }, ErrorCode::invalid_argument, {"softcap", "float32"});
  }
  Call c;
  c.options.scale = 1e300;
  expect_error([&] { c.run_forward(); }, ErrorCode::invalid_argument, {"scale", "float32"});
  // The float64 reference takes them as given, and within float32's range the fast kernel does too.
  for (Kernel kernel : {Kernel::reference, Kernel::fast}) {
    Call ok;
    ok.options.kernel = kernel;
    ok.options.softcap = kernel == Kernel::reference ? 1e300 : 1e37;
    ok.options.scale = kernel == Kernel::reference ? 1e-300 : 1e30;
    ok.run_forward();
    EXPECT_FALSE(testing::has_nan(ok.out)) << kernel_name(kernel);
  }
}

// A case fuzz/fuzz_validation.cpp found: with no heads at all (Hq = Hkv = 0) but m > 0 keys, there is
// no KV head, so a kernel that assumed one would read keys and write gradients of a head that has no
// memory. Every view here is empty, with a null data pointer: nothing may be touched.
TEST(Validation, NoHeadsAtAllIsAnEmptyProblemForEveryKernel) {
  const auto empty = [](std::initializer_list<std::int64_t> sizes) {
    return TensorView::contiguous(nullptr, DType::f32, sizes);
  };
  for (Kernel kernel : {Kernel::fast, Kernel::reference}) {
    AttentionOptions options;
    options.kernel = kernel;
    const TensorView q = empty({2, 0, 3, 4}), k = empty({2, 0, 5, 4}), v = empty({2, 0, 5, 6}), out = empty({2, 0, 3, 6});
    forward(q, k, v, out, options, {.lse = empty({2, 0, 3}), .probs = empty({2, 0, 3, 5})});
    const TensorView d_out = empty({2, 0, 3, 6}), dq = empty({2, 0, 3, 4}), dk = empty({2, 0, 5, 4}), dv = empty({2, 0, 5, 6});
    backward(q, k, v, out, d_out, empty({2, 0, 3}), dq, dk, dv, options);
  }
}

TEST(Validation, Dtypes) {
  Rng rng(4);
  {
    Call c;
    c.k = random_tensor(rng, {2, 2, 5, 6}, DType::f16);
    expect_error([&] { c.run_forward(); }, ErrorCode::invalid_dtype, {"k:", "f16", "f32"});
  }
  {
    Call c;
    c.out = Tensor(DType::f64, {2, 4, 3, 7});
    expect_error([&] { c.run_forward(); }, ErrorCode::invalid_dtype, {"out:", "f64", "f32"});
  }
  {
    Call c;
    c.lse = Tensor(DType::f64, {2, 4, 3});
    expect_error([&] { c.run_forward(); }, ErrorCode::invalid_dtype, {"lse", "f32"});
  }
  {
    Tensor qi(DType::i32, {2, 4, 3, 6}), ki(DType::i32, {2, 2, 5, 6}), vi(DType::i32, {2, 2, 5, 7}), oi(DType::i32, {2, 4, 3, 7});
    expect_error([&] { forward(qi.view(), ki.view(), vi.view(), oi.view()); }, ErrorCode::invalid_dtype, {"q", "i32"});
  }
  {
    Call c;
    c.dk = Tensor(DType::bf16, {2, 2, 5, 6});
    expect_error([&] { c.run_backward(); }, ErrorCode::invalid_dtype, {"dk:", "bf16"});
  }
}

TEST(Validation, NullPointerWithElements) {
  Call c;
  ConstTensorView null_q(nullptr, DType::f32, {2, 4, 3, 6}, {72, 18, 6, 1});
  expect_error([&] { forward(null_q, c.k.view(), c.v.view(), c.out.view()); }, ErrorCode::null_pointer,
               {"q [2, 4, 3, 6]", "null"});
  // A null pointer is fine when there are no elements.
  ConstTensorView empty_q(nullptr, DType::f32, {2, 4, 0, 6}, {0, 0, 6, 1});
  TensorView empty_out(nullptr, DType::f32, {2, 4, 0, 7}, {0, 0, 7, 1});
  forward(empty_q, c.k.view(), c.v.view(), empty_out);
}

TEST(Validation, OutputsMustNotOverlapInputsOrEachOther) {
  Call c;
  // out written over q's memory (same size in elements: reuse q as a [2, 4, 3, 6] "out" with d_v = 6).
  Rng rng(5);
  Tensor v6 = random_tensor(rng, {2, 2, 5, 6}, DType::f32);
  expect_error([&] { forward(c.q.view(), c.k.view(), v6.view(), c.q.view()); }, ErrorCode::overlap, {"out", "q"});
  // lse aliasing out's memory.
  TensorView lse_in_out(c.out.raw(), DType::f32, {2, 4, 3}, {12, 3, 1});
  expect_error([&] { forward(c.q.view(), c.k.view(), c.v.view(), c.out.view(), {}, {lse_in_out, std::nullopt}); },
               ErrorCode::overlap, {"out", "lse"});
  // dk over dv
  TensorView dv_as_dk(c.dv.raw(), DType::f32, {2, 2, 5, 6}, {70, 35, 7, 1});
  expect_error([&] { backward(c.q.view(), c.k.view(), c.v.view(), c.out.view(), c.d_out.view(), c.lse.view(), c.dq.view(), dv_as_dk, c.dv.view()); },
               ErrorCode::overlap, {"dk", "dv"});
  // An output that writes one element many times.
  TensorView broadcast_out(c.out.raw(), DType::f32, {2, 4, 3, 7}, {0, 0, 0, 1});
  expect_error([&] { forward(c.q.view(), c.k.view(), c.v.view(), broadcast_out); }, ErrorCode::overlap, {"out", "stride 0"});
}

TEST(Validation, SizesThatOverflow) {
  float x = 0;
  const std::int64_t huge = std::int64_t{1} << 40;
  ConstTensorView q(&x, DType::f32, {huge, huge, 1, 1}, {0, 0, 0, 0});
  expect_error([&] { forward(q, q, q, TensorView(&x, DType::f32, {1, 1, 1, 1}, {1, 1, 1, 1})); }, ErrorCode::size_overflow,
               {"q", "overflows"});
  ConstTensorView far(&x, DType::f32, {1, 1, 3, 1}, {1, 1, std::int64_t{1} << 62, 1});
  expect_error([&] { forward(far, far, far, TensorView(&x, DType::f32, {1, 1, 3, 1}, {1, 1, 1, 1})); },
               ErrorCode::size_overflow, {"q"});
  ConstTensorView negative(&x, DType::f32, {1, 1, -3, 1}, {1, 1, 1, 1});
  expect_error([&] { forward(negative, negative, negative, TensorView(&x, DType::f32, {1, 1, 1, 1}, {1, 1, 1, 1})); },
               ErrorCode::invalid_shape, {"q", "negative"});
}

// Cases fuzz/fuzz_validation.cpp found. A size of 0 must not excuse the others: [B, 0, m, d] with an
// absurd B would overflow kernels that loop over batch × heads; a stride of INT64_MAX on a 1-byte mask
// must not overflow the extent's "largest offset + 1" in validation itself; and the stride of a size-1
// dimension is checked too, since the kernel's step in bytes would overflow.
TEST(Validation, ProductsOfSizesStridesAndExtentsPast64BitsAreRefused) {
  Call c;
  float x = 0;
  const TensorView out(&x, DType::f32, {1, 1, 1, 1}, {1, 1, 1, 1});
  const ConstTensorView empty_but_huge(nullptr, DType::f32, {std::int64_t{1} << 62, 0, 4, 8}, {0, 0, 0, 0});
  expect_error([&] { forward(empty_but_huge, empty_but_huge, empty_but_huge, out); }, ErrorCode::size_overflow,
               {"q", "product of its sizes overflows"});
  const std::int64_t far = std::numeric_limits<std::int64_t>::max();
  const bool keep = true;
  c.options.mask = ConstTensorView(&keep, DType::boolean, {2, 1, 1, 1}, {far, 1, 1, 1});
  expect_error([&] { c.run_forward(); }, ErrorCode::size_overflow, {"mask", "byte extent overflows"});
  const ConstTensorView size_one_far(&x, DType::f32, {1, 1, 1, 1}, {1, 1, 1, std::int64_t{1} << 61});
  expect_error([&] { forward(size_one_far, size_one_far, size_one_far, out); }, ErrorCode::size_overflow,
               {"q", "strides reach past"});
}

// A case fuzz/fuzz_validation.cpp found: strides of an empty view are never checked (it reaches no
// memory), so a kernel must not form the addresses of zero-width key rows, where a batch stride of
// INT64_MAX would overflow the pointer. With d_k = 0 every logit is 0: each output row is the mean of v.
TEST(Validation, EmptyViewsMayHaveAnyStrides) {
  Rng rng(11);
  const Tensor v = random_tensor(rng, {2, 1, 3, 2}, DType::f32);
  const std::int64_t far = std::numeric_limits<std::int64_t>::max();
  const ConstTensorView q(nullptr, DType::f32, {2, 1, 4, 0}, {far, -far, far, 1});
  const ConstTensorView k(nullptr, DType::f32, {2, 1, 3, 0}, {far, far, -far, far});
  for (Kernel kernel : {Kernel::fast, Kernel::reference}) {
    Tensor out = testing::poisoned(DType::f32, {2, 1, 4, 2});
    AttentionOptions options;
    options.kernel = kernel;
    forward(q, k, v.view(), out.view(), options);
    for (std::int64_t b = 0; b < 2; ++b)
      for (std::int64_t i = 0; i < 4; ++i)
        for (std::int64_t c = 0; c < 2; ++c) {
          double mean = 0;
          for (std::int64_t j = 0; j < 3; ++j) mean += *v.view().at<float>({b, 0, j, c}) / 3.0;
          EXPECT_NEAR(*out.view().at<float>({b, 0, i, c}), mean, 1e-6) << kernel_name(kernel);
        }
  }
}

// A case fuzz/fuzz_validation.cpp found: an lse view with strides [-8, -6, -1] writes some elements
// twice (rows that share an element overwrite each other, and two threads may race on it), so refusing
// zero strides is not enough: an output's strides must step past what its smaller strides reach.
TEST(Validation, OutputsThatWriteAnElementTwiceAreRefused) {
  Call c;
  const TensorView self_overlapping_out(c.out.raw(), DType::f32, {2, 4, 3, 7}, {84, 7, 7, 1});
  expect_error([&] { forward(c.q.view(), c.k.view(), c.v.view(), self_overlapping_out); }, ErrorCode::overlap,
               {"out", "(stride 7)", "overwrite each other"});
  std::vector<float> room(64);
  const TensorView self_overlapping_lse(room.data() + 40, DType::f32, {2, 4, 3}, {-8, -6, -1});
  expect_error([&] { forward(c.q.view(), c.k.view(), c.v.view(), c.out.view(), {}, {.lse = self_overlapping_lse}); },
               ErrorCode::overlap, {"lse", "strides [-8, -6, -1]"});
  // Permuted, padded and reversed layouts write each element once and pass.
  Tensor padded(DType::f32, {2, 4, 3, 9});
  const TensorView reversed(static_cast<float*>(padded.raw()) + 2 * 4 * 3 * 9 - 9, DType::f32, {2, 4, 3, 7},
                            {-108, -27, -9, 1});
  forward(c.q.view(), c.k.view(), c.v.view(), reversed);
  Tensor heads_first(DType::f32, {4, 2, 3, 7});
  forward(c.q.view(), c.k.view(), c.v.view(), heads_first.view().permuted({1, 0, 2, 3}));
}

TEST(Validation, KernelChoiceIsVisibleAndNeverSilentlyReplaced) {
  EXPECT_EQ(resolve_kernel(Kernel::automatic, DType::f32), Kernel::fast);
  EXPECT_EQ(resolve_kernel(Kernel::automatic, DType::bf16), Kernel::fast);
  EXPECT_EQ(resolve_kernel(Kernel::automatic, DType::f64), Kernel::reference);
  EXPECT_EQ(resolve_kernel(Kernel::reference, DType::f32), Kernel::reference);
  EXPECT_STREQ(kernel_name(resolve_kernel(Kernel::fast, DType::f16)), "fast");
  // The fast kernel computes in float32: asked for by name with f64 inputs, it refuses.
  expect_error([] { resolve_kernel(Kernel::fast, DType::f64); }, ErrorCode::unsupported, {"fast", "f64"});
  Rng rng(9);
  Tensor q = random_tensor(rng, {1, 1, 2, 3}), k = random_tensor(rng, {1, 1, 4, 3}), v = random_tensor(rng, {1, 1, 4, 3});
  Tensor out(DType::f64, {1, 1, 2, 3});
  AttentionOptions fast;
  fast.kernel = Kernel::fast;
  expect_error([&] { forward(q.view(), k.view(), v.view(), out.view(), fast); }, ErrorCode::unsupported, {"kernel", "f64"});
  // The backward follows the same rule.
  Tensor d_out = random_tensor(rng, {1, 1, 2, 3}), lse(DType::f32, {1, 1, 2});
  Tensor dq(DType::f64, {1, 1, 2, 3}), dk(DType::f64, {1, 1, 4, 3}), dv(DType::f64, {1, 1, 4, 3});
  expect_error([&] { backward(q.view(), k.view(), v.view(), out.view(), d_out.view(), lse.view(), dq.view(), dk.view(), dv.view(), fast); },
               ErrorCode::unsupported, {"kernel", "f64"});
  Call c;
  c.options.kernel = Kernel::fast;
  c.run_forward();
  c.run_backward();
  EXPECT_FALSE(testing::has_nan(c.dq) || testing::has_nan(c.dk) || testing::has_nan(c.dv));
}

TEST(Validation, BackwardShapes) {
  {
    Call c;
    c.d_out = Tensor(DType::f32, {2, 4, 3, 6});
    expect_error([&] { c.run_backward(); }, ErrorCode::invalid_shape, {"d_out", "[2, 4, 3, 7]"});
  }
  {
    Call c;
    c.lse = Tensor(DType::f32, {2, 4, 4});
    expect_error([&] { c.run_backward(); }, ErrorCode::invalid_shape, {"lse", "[2, 4, 3]"});
  }
  {
    Call c;
    c.dk = Tensor(DType::f32, {2, 4, 5, 6});
    expect_error([&] { c.run_backward(); }, ErrorCode::invalid_shape, {"dk", "[2, 2, 5, 6]"});
  }
}

}  // namespace
}  // namespace attnkit
