// varlen_forward / varlen_backward at the API edge: bad offsets and shapes raise errors naming the
// argument (and the offending index) with every output untouched; empty batches and sequences follow
// the empty-row rule; the fast kernel and the reference agree on a small packed call; and the
// reference's gradients match central finite differences of its forward, for every option.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "support/testing.hpp"

namespace attnkit {
namespace {

using testing::random_tensor;
using testing::Rng;

Tensor offsets(std::initializer_list<std::int64_t> values, DType dtype = DType::i64) {
  Tensor t(dtype, {static_cast<std::int64_t>(values.size())});
  std::int64_t i = 0;
  for (std::int64_t value : values) {
    if (dtype == DType::i32) {
      t.data<std::int32_t>()[i++] = static_cast<std::int32_t>(value);
    } else if (dtype == DType::i64) {
      t.data<std::int64_t>()[i++] = value;
    } else {
      t.data<float>()[i++] = static_cast<float>(value);
    }
  }
  return t;
}

// A valid packed call: sequences of (3, 5), (0, 2), (4, 0) queries and keys; Hq = 4, Hkv = 2,
// d_k = 6, d_v = 7. Outputs start poisoned with NaN.
struct PackedCall {
  Tensor q, k, v, out, lse, probs, d_out, dq, dk, dv, cu_q, cu_k;
  AttentionOptions options;
  PackedCall() {
    Rng rng(11);
    q = random_tensor(rng, {7, 4, 6}, DType::f32);
    k = random_tensor(rng, {7, 2, 6}, DType::f32);
    v = random_tensor(rng, {7, 2, 7}, DType::f32);
    cu_q = offsets({0, 3, 3, 7});
    cu_k = offsets({0, 5, 7, 7}, DType::i32);
    out = testing::poisoned(DType::f32, {7, 4, 7});
    lse = testing::poisoned(DType::f32, {4, 7});
    probs = testing::poisoned(DType::f32, {3, 4, 4, 5});
    d_out = random_tensor(rng, {7, 4, 7}, DType::f32);
    dq = testing::poisoned(DType::f32, {7, 4, 6});
    dk = testing::poisoned(DType::f32, {7, 2, 6});
    dv = testing::poisoned(DType::f32, {7, 2, 7});
  }
  void run_forward() {
    varlen_forward(q.view(), k.view(), v.view(), {cu_q.view(), cu_k.view()}, out.view(), options, {lse.view(), probs.view()});
  }
  void run_backward() {
    varlen_backward(q.view(), k.view(), v.view(), {cu_q.view(), cu_k.view()}, out.view(), d_out.view(), lse.view(), dq.view(),
                    dk.view(), dv.view(), options);
  }
  std::vector<std::vector<unsigned char>> output_bytes() const {
    return testing::bytes_of({&out, &lse, &probs, &dq, &dk, &dv});
  }
};

// Runs the call's forward and backward, each of which must raise `code` with every fragment in its
// message and leave every output byte for byte as it was.
enum class Passes { both, forward_only, backward_only };
void expect_refused(PackedCall& call, ErrorCode code, std::initializer_list<std::string> fragments,
                    Passes passes = Passes::both) {
  for (int pass = 0; pass < 2; ++pass) {
    if ((pass == 0 && passes == Passes::backward_only) || (pass == 1 && passes == Passes::forward_only)) continue;
    SCOPED_TRACE(pass == 0 ? "varlen_forward" : "varlen_backward");
    const auto before = call.output_bytes();
    try {
      pass == 0 ? call.run_forward() : call.run_backward();
      ADD_FAILURE() << "no error raised; expected " << error_code_name(code);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), code) << e.what();
      for (const std::string& f : fragments) EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what() << "\n  missing: " << f;
      EXPECT_TRUE(call.output_bytes() == before) << "a refused call wrote an output: " << e.what();
    }
  }
}

// Sinks: the packed forward takes them (a sequence with no keys gives zeros and lse = the sink), the
// backward writes their gradient, and a wrong count is refused naming the query heads.
TEST(Varlen, Sinks) {
  PackedCall call;
  const float sinks[] = {0.5f, -1.0f, 2.0f, 3.0f};
  call.options.sinks = sinks;
  call.run_forward();
  for (std::int64_t i = 3; i < 7; ++i)
    for (std::int64_t h = 0; h < 4; ++h) {
      EXPECT_EQ(call.lse.data<float>()[h * 7 + i], sinks[h]);
      for (std::int64_t c = 0; c < 7; ++c) EXPECT_EQ(call.out.data<float>()[(i * 4 + h) * 7 + c], 0.0f);
    }
  Tensor d_sinks = testing::poisoned(DType::f32, {4});
  varlen_backward(call.q.view(), call.k.view(), call.v.view(), {call.cu_q.view(), call.cu_k.view()}, call.out.view(),
                  call.d_out.view(), call.lse.view(), call.dq.view(), call.dk.view(), call.dv.view(), call.options,
                  BackwardExtras{d_sinks.view()});
  EXPECT_FALSE(testing::has_nan(d_sinks) || testing::has_nan(call.dq));
  PackedCall refused;
  const float three[] = {0.5f, -1.0f, 2.0f};
  refused.options.sinks = three;
  expect_refused(refused, ErrorCode::invalid_shape, {"sinks", "(4)", "got 3"});
}

TEST(Varlen, ValidCallWritesEveryOutput) {
  PackedCall call;
  call.run_forward();
  call.run_backward();
  for (const Tensor* t : {&call.out, &call.lse, &call.probs, &call.dq, &call.dk, &call.dv}) EXPECT_FALSE(testing::has_nan(*t));
  // Sequence 2 has no keys: its rows are empty (out 0, lse −inf, dq 0).
  for (std::int64_t i = 3; i < 7; ++i) {
    for (std::int64_t h = 0; h < 4; ++h) {
      EXPECT_EQ(call.lse.data<float>()[h * 7 + i], -std::numeric_limits<float>::infinity());
      for (std::int64_t c = 0; c < 7; ++c) EXPECT_EQ(call.out.data<float>()[(i * 4 + h) * 7 + c], 0.0f);
      for (std::int64_t c = 0; c < 6; ++c) EXPECT_EQ(call.dq.data<float>()[(i * 4 + h) * 6 + c], 0.0f);
    }
  }
  // Sequence 1's keys are seen by no query: zero gradients.
  for (std::int64_t j = 5; j < 7; ++j)
    for (std::int64_t x = 0; x < 2 * 6; ++x) EXPECT_EQ(call.dk.data<float>()[j * 12 + x], 0.0f);
}

TEST(Varlen, OffsetsMustStartAtZero) {
  PackedCall call;
  call.cu_q = offsets({1, 3, 3, 7});
  expect_refused(call, ErrorCode::invalid_argument, {"cu_seqlens_q[0]", "must be 0", "got 1"});
}

TEST(Varlen, OffsetsMustNotDecrease) {
  PackedCall call;
  call.cu_k = offsets({0, 5, 4, 7});
  expect_refused(call, ErrorCode::invalid_argument, {"cu_seqlens_k[2]", "4 is less than cu_seqlens_k[1] = 5", "non-decreasing"});
}

TEST(Varlen, OffsetsMustNotPassTheEnd) {
  PackedCall call;
  call.cu_q = offsets({0, 3, 9, 7});
  expect_refused(call, ErrorCode::invalid_argument, {"cu_seqlens_q[2]", "9 is past the end of q's 7 packed rows"});
}

TEST(Varlen, TheLastOffsetIsTheTotal) {
  PackedCall call;
  call.cu_k = offsets({0, 5, 6, 6});
  expect_refused(call, ErrorCode::invalid_argument, {"cu_seqlens_k[3]", "the last offset, 6", "k's 7 packed rows"});
}

TEST(Varlen, BothSidesListTheSameSequences) {
  PackedCall call;
  call.cu_k = offsets({0, 5, 7});
  expect_refused(call, ErrorCode::invalid_shape, {"cu_seqlens_q, cu_seqlens_k", "4 and 3 offsets"});
}

TEST(Varlen, OffsetsAreRankOneIntegers) {
  {
    PackedCall call;
    call.cu_q = offsets({0, 3, 3, 7}, DType::f32);
    expect_refused(call, ErrorCode::invalid_dtype, {"cu_seqlens_q", "f32", "i32 or i64"});
  }
  {
    PackedCall call;
    call.cu_k = Tensor(DType::i64, {1, 4});
    expect_refused(call, ErrorCode::invalid_shape, {"cu_seqlens_k", "rank 1", "[1, 4]"});
  }
  {
    PackedCall call;
    call.cu_q = Tensor(DType::i64, {0});
    expect_refused(call, ErrorCode::invalid_shape, {"cu_seqlens_q", "at least the leading 0"});
  }
}

TEST(Varlen, PackedShapesAreChecked) {
  {
    PackedCall call;
    Rng rng(1);
    call.q = random_tensor(rng, {1, 7, 4, 6}, DType::f32);
    expect_refused(call, ErrorCode::invalid_shape, {"q:", "rank 3", "[total_q, heads, d_k]"});
  }
  {
    PackedCall call;
    call.v = Tensor(DType::f32, {6, 2, 7});
    expect_refused(call, ErrorCode::invalid_shape, {"v:", "6 packed rows", "k has 7"});
  }
  {
    PackedCall call;
    call.lse = testing::poisoned(DType::f32, {7, 4});
    expect_refused(call, ErrorCode::invalid_shape, {"lse", "[4, 7]", "[Hq, total_q]"});
  }
  {
    PackedCall call;
    call.probs = testing::poisoned(DType::f32, {3, 4, 7, 7});
    expect_refused(call, ErrorCode::invalid_shape, {"probs", "[3, 4, 4, 5]", "max_n, max_m"}, Passes::forward_only);
  }
  {
    PackedCall call;
    call.dk = testing::poisoned(DType::f32, {7, 4, 6});
    expect_refused(call, ErrorCode::invalid_shape, {"dk:", "[7, 2, 6]", "[7, 4, 6]"}, Passes::backward_only);
  }
}

TEST(Varlen, KeyLengthsAreNotTaken) {
  PackedCall call;
  const std::vector<std::int64_t> lengths = {1, 1, 1};
  call.options.key_lengths = lengths;
  expect_refused(call, ErrorCode::invalid_argument, {"key_lengths", "cu_seqlens_k"});
}

TEST(Varlen, MaskIsPerSequenceAndPadded) {
  PackedCall call;
  Tensor mask(DType::f32, {3, 4, 4, 6});  // max_m is 5
  call.options.mask = mask.view();
  expect_refused(call, ErrorCode::invalid_shape, {"mask:", "[3, 4, 4, 5]"});
}

TEST(Varlen, EmptyBatchesAndSequences) {
  for (Kernel kernel : {Kernel::reference, Kernel::fast}) {
    SCOPED_TRACE(kernel_name(kernel));
    // No sequences at all.
    Tensor q(DType::f32, {0, 2, 4}), k(DType::f32, {0, 1, 4}), v(DType::f32, {0, 1, 3}), out(DType::f32, {0, 2, 3});
    Tensor lse(DType::f32, {2, 0}), dq(DType::f32, {0, 2, 4}), dk(DType::f32, {0, 1, 4}), dv(DType::f32, {0, 1, 3});
    const Tensor none = offsets({0});
    AttentionOptions o;
    o.kernel = kernel;
    varlen_forward(q.view(), k.view(), v.view(), {none.view(), none.view()}, out.view(), o, {lse.view(), std::nullopt});
    varlen_backward(q.view(), k.view(), v.view(), {none.view(), none.view()}, out.view(), out.view(), lse.view(), dq.view(),
                    dk.view(), dv.view(), o);
    // Sequences with no queries only: nothing to write, and their keys get zero gradients.
    Rng rng(3);
    const Tensor k2 = random_tensor(rng, {5, 1, 4}, DType::f32), v2 = random_tensor(rng, {5, 1, 3}, DType::f32);
    Tensor dk2 = testing::poisoned(DType::f32, {5, 1, 4}), dv2 = testing::poisoned(DType::f32, {5, 1, 3});
    const Tensor cu_q = offsets({0, 0, 0}), cu_k = offsets({0, 2, 5});
    varlen_forward(q.view(), k2.view(), v2.view(), {cu_q.view(), cu_k.view()}, out.view(), o, {lse.view(), std::nullopt});
    varlen_backward(q.view(), k2.view(), v2.view(), {cu_q.view(), cu_k.view()}, out.view(), out.view(), lse.view(), dq.view(),
                    dk2.view(), dv2.view(), o);
    for (const Tensor* t : {&dk2, &dv2})
      for (std::int64_t i = 0; i < t->numel(); ++i) EXPECT_EQ(t->data<float>()[i], 0.0f);
  }
}

// ---- the reference's gradients against finite differences of its forward ----

struct SmallPacked {
  Tensor q, k, v, g, cu_q, cu_k, mask;
  std::vector<float> slopes = {0.25f, 0.5f};
};

double packed_loss(const SmallPacked& p, const AttentionOptions& o) {
  Tensor out(DType::f64, {p.q.shape()[0], 2, 3});
  varlen_forward(p.q.view(), p.k.view(), p.v.view(), {p.cu_q.view(), p.cu_k.view()}, out.view(), o);
  double sum = 0;
  for (std::int64_t i = 0; i < out.numel(); ++i) sum += out.data<double>()[i] * p.g.data<double>()[i];
  return sum;
}

TEST(Varlen, ReferenceGradientsMatchFiniteDifferences) {
  struct OptionCase {
    const char* name;
    std::function<void(AttentionOptions&, const SmallPacked&)> set;
  };
  const std::vector<OptionCase> cases = {
      {"plain", [](AttentionOptions&, const SmallPacked&) {}},
      {"bottom_right causal", [](AttentionOptions& o, const SmallPacked&) { o.causal = Causal::bottom_right; }},
      {"top_left causal + window", [](AttentionOptions& o, const SmallPacked&) { o.causal = Causal::top_left, o.window = {1, -1}; }},
      {"alibi + softcap", [](AttentionOptions& o, const SmallPacked& p) { o.alibi_slopes = p.slopes, o.softcap = 2.0; }},
      {"additive mask", [](AttentionOptions& o, const SmallPacked& p) { o.mask = p.mask.view(); }},
      {"dropout", [](AttentionOptions& o, const SmallPacked&) { o.dropout_p = 0.3, o.seed = 42; }},
  };
  for (const OptionCase& oc : cases) {
    SCOPED_TRACE(oc.name);
    Rng rng(5);
    SmallPacked p;
    // Sequences of (3, 4), (0, 2), (2, 0), (1, 3) queries and keys; Hq = 2, Hkv = 1, d_k = 4, d_v = 3.
    p.cu_q = offsets({0, 3, 3, 5, 6});
    p.cu_k = offsets({0, 4, 6, 6, 9}, DType::i32);
    p.q = random_tensor(rng, {6, 2, 4});
    p.k = random_tensor(rng, {9, 1, 4});
    p.v = random_tensor(rng, {9, 1, 3});
    p.g = random_tensor(rng, {6, 2, 3});
    p.mask = random_tensor(rng, {4, 2, 3, 4});
    AttentionOptions o;
    o.kernel = Kernel::reference;
    oc.set(o, p);
    Tensor out(DType::f64, {6, 2, 3}), lse(DType::f32, {2, 6});
    varlen_forward(p.q.view(), p.k.view(), p.v.view(), {p.cu_q.view(), p.cu_k.view()}, out.view(), o, {lse.view(), std::nullopt});
    Tensor dq = testing::poisoned(DType::f64, {6, 2, 4}), dk = testing::poisoned(DType::f64, {9, 1, 4}),
           dv = testing::poisoned(DType::f64, {9, 1, 3});
    varlen_backward(p.q.view(), p.k.view(), p.v.view(), {p.cu_q.view(), p.cu_k.view()}, out.view(), p.g.view(), lse.view(),
                    dq.view(), dk.view(), dv.view(), o);
    for (auto [name, input, grad] : {std::tuple{"dq", &p.q, &dq}, std::tuple{"dk", &p.k, &dk}, std::tuple{"dv", &p.v, &dv}}) {
      constexpr double kStep = 1e-6, kTolerance = 1e-7;
      double* x = input->data<double>();
      for (std::int64_t i = 0; i < input->numel(); ++i) {
        const double saved = x[i];
        x[i] = saved + kStep;
        const double up = packed_loss(p, o);
        x[i] = saved - kStep;
        const double down = packed_loss(p, o);
        x[i] = saved;
        const double exact = grad->data<double>()[i];
        ASSERT_NEAR(exact, (up - down) / (2 * kStep), kTolerance * (1 + std::fabs(exact))) << name << " element " << i;
      }
    }
  }
}

}  // namespace
}  // namespace attnkit
