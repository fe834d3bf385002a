// Collective error handling: a disagreement between ranks, or one rank's bad argument, raises on
// EVERY rank (ctest's TIMEOUT catches a hang); refused options and dtypes raise with their reason.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "attnkit/attnkit.hpp"
#include "attnkit/dist.hpp"
#include "dist_testing.hpp"
#include "support/testing.hpp"

namespace attnkit::dist {
namespace {

// One rank's arguments for a global sequence of length N, in the zigzag layout by default.
struct Shards {
  Tensor q, k, v, out, lse, dq, dk, dv;
  Shards(std::int64_t N, std::int64_t d, Layout layout = Layout::zigzag, DType dtype = DType::f32, std::int64_t extra_rows = 0) {
    const std::int64_t n = local_length(layout, N, testing::world_rank(), testing::world_size()) + extra_rows;
    testing::Rng rng(5);
    q = testing::random_tensor(rng, {2, 2, n, d}, dtype);
    k = testing::random_tensor(rng, {2, 2, n, d}, dtype);
    v = testing::random_tensor(rng, {2, 2, n, d}, dtype);
    out = testing::poisoned(dtype, {2, 2, n, d});
    lse = testing::poisoned(DType::f32, {2, 2, n});
    dq = Tensor(dtype, q.shape());
    dk = Tensor(dtype, k.shape());
    dv = Tensor(dtype, v.shape());
  }
  void forward(const RingOptions& o = {}) {
    ring_forward(MPI_COMM_WORLD, q.view(), k.view(), v.view(), out.view(), lse.view(), o);
  }
  void backward(const RingOptions& o = {}) {
    ring_backward(MPI_COMM_WORLD, q.view(), k.view(), v.view(), out.view(), out.view(), lse.view(), dq.view(), dk.view(),
                  dv.view(), o);
  }
};

// `call` must raise Error(code) whose message contains `text`, on this rank (so on every rank).
void expect_error(const std::function<void()>& call, ErrorCode code, const std::string& text) {
  try {
    call();
    ADD_FAILURE() << "no error on rank " << testing::world_rank() << "; expected one containing \"" << text << "\"";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << "rank " << testing::world_rank() << ": " << e.what();
  }
}

class DistAgreement : public ::testing::Test {
 protected:
  void SetUp() override {
    if (P < 2) GTEST_SKIP() << "needs at least 2 ranks to disagree";
  }
  const int rank = testing::world_rank(), P = testing::world_size();
};

TEST_F(DistAgreement, HeadSizeDiffersOnOneRank) {
  Shards s(37, rank == P - 1 ? 9 : 8);
  expect_error([&] { s.forward(); }, ErrorCode::invalid_argument, "ranks disagree on the head size d_k");
  EXPECT_TRUE(testing::all_nan(s.out)) << "nothing is written on a refused call";
}

TEST_F(DistAgreement, OptionsDiffer) {
  Shards s(37, 8);
  RingOptions o;
  o.attention.causal = rank == 1 ? Causal::top_left : Causal::none;
  expect_error([&] { s.forward(o); }, ErrorCode::invalid_argument, "ranks disagree on options.causal");
  RingOptions scaled;
  if (rank == 0) scaled.attention.scale = 0.5;
  expect_error([&] { s.forward(scaled); }, ErrorCode::invalid_argument, "options.scale");
  std::vector<std::int64_t> lengths{37, rank == 1 ? 20 : 21};
  RingOptions padded;
  padded.attention.key_lengths = lengths;
  expect_error([&] { s.forward(padded); }, ErrorCode::invalid_argument, "the key_lengths values");
}

TEST_F(DistAgreement, LayoutDiffers) {
  // Same length on every rank, so that only the layout differs (37 over 2 ranks: 19 and 18 either way).
  const Layout layout = rank == 0 ? Layout::contiguous : Layout::zigzag;
  Shards s(37, 8, layout);
  RingOptions o;
  o.layout = layout;
  expect_error([&] { s.forward(o); }, ErrorCode::invalid_argument, "ranks disagree on the layout: rank 0 has contiguous, rank 1 has zigzag");
}

TEST_F(DistAgreement, ForwardOnOneRankBackwardOnAnother) {
  Shards s(37, 8);
  expect_error([&] { rank == 0 ? s.forward() : s.backward(); }, ErrorCode::invalid_argument, "the operation");
}

TEST_F(DistAgreement, OneRankRejectsItsArgumentsAndAllRaise) {
  Shards s(37, 8);
  if (rank == 1) s.lse = Tensor(DType::f32, {2, 2, 3});
  if (rank == 1) {
    expect_error([&] { s.forward(); }, ErrorCode::invalid_shape, "lse: expected shape");
  } else {
    expect_error([&] { s.forward(); }, ErrorCode::invalid_shape, "rank 1 rejected its arguments");
  }
}

TEST_F(DistAgreement, LocalLengthsThatTheLayoutDoesNotGive) {
  // Rank 0 passes one row more than its share: consistent locally, wrong for the sum of lengths.
  Shards s(37, 8, Layout::zigzag, DType::f32, rank == 0 ? 1 : 0);
  expect_error([&] { s.forward(); }, ErrorCode::invalid_shape, "rank 0 holds");
}

// Single-rank cases (also run on 1 rank): refused dtypes and options name their reason.
TEST(DistRefusals, F64AndUnsupportedOptions) {
  Shards s64(37, 8, Layout::zigzag, DType::f64);
  expect_error([&] { s64.forward(); }, ErrorCode::invalid_dtype, "f64 is not supported");
  Shards s(37, 8);
  const float slopes[2] = {0.5f, 0.25f};
  bool keep[1] = {true};
  const std::vector<std::pair<std::function<void(AttentionOptions&)>, std::string>> refused{
      {[&](AttentionOptions& o) { o.mask = ConstTensorView(keep, DType::boolean, {1, 1}, {1, 1}); }, "options.mask"},
      {[](AttentionOptions& o) { o.window = {4, 0}; }, "options.window"},
      {[&](AttentionOptions& o) { o.alibi_slopes = slopes; }, "options.alibi_slopes"},
      {[](AttentionOptions& o) { o.dropout_p = 0.1; }, "options.dropout_p"},
      {[&](AttentionOptions& o) { o.sinks = slopes; }, "options.sinks"},
      {[](AttentionOptions& o) { o.kernel = Kernel::reference; }, "Kernel::reference"},
  };
  for (const auto& [set, name] : refused) {
    RingOptions o;
    set(o.attention);
    expect_error([&] { s.forward(o); }, ErrorCode::unsupported, name + " is not supported across ranks");
    expect_error([&] { s.backward(o); }, ErrorCode::unsupported, name);
  }
}

TEST(DistRefusals, BadArguments) {
  Shards s(37, 8);
  RingOptions o;
  std::vector<std::int64_t> too_long{37, 38};
  o.attention.key_lengths = too_long;
  expect_error([&] { s.forward(o); }, ErrorCode::invalid_argument, "key_lengths[1] = 38 is outside 0..N = 37");
  std::vector<std::int64_t> one{3};
  o.attention.key_lengths = one;
  expect_error([&] { s.forward(o); }, ErrorCode::invalid_shape, "one per batch entry");
  RingOptions negative;
  negative.attention.softcap = -1;
  expect_error([&] { s.forward(negative); }, ErrorCode::invalid_argument, "options.softcap");
  // Checked once for the whole call, since the block steps go straight to the float32 kernel.
  RingOptions huge_scale;
  huge_scale.attention.scale = 1e300;
  expect_error([&] { s.forward(huge_scale); }, ErrorCode::invalid_argument, "options.scale");
  expect_error([&] { s.backward(huge_scale); }, ErrorCode::invalid_argument, "outside float32's range");
  RingOptions tiny_softcap;
  tiny_softcap.attention.softcap = 1e-300;
  expect_error([&] { s.forward(tiny_softcap); }, ErrorCode::invalid_argument, "options.softcap");
  Tensor odd_heads(DType::f32, {2, 3, s.q.shape()[2], 8});
  expect_error([&] { ring_forward(MPI_COMM_WORLD, odd_heads.view(), s.k.view(), s.v.view(), s.out.view(), s.lse.view()); },
               ErrorCode::invalid_shape, "must divide q's heads 3");
  expect_error([&] { ring_forward(MPI_COMM_NULL, s.q.view(), s.k.view(), s.v.view(), s.out.view(), s.lse.view()); },
               ErrorCode::invalid_argument, "MPI_COMM_NULL");
  Tensor wrong_dq(DType::f32, {2, 2, s.q.shape()[2], 7});
  expect_error([&] {
    ring_backward(MPI_COMM_WORLD, s.q.view(), s.k.view(), s.v.view(), s.out.view(), s.out.view(), s.lse.view(),
                  wrong_dq.view(), s.dk.view(), s.dv.view());
  }, ErrorCode::invalid_shape, "dq: expected shape");
  EXPECT_TRUE(testing::all_nan(s.out)) << "nothing is written on a refused call";
}

}  // namespace
}  // namespace attnkit::dist
