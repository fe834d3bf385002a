// The layouts: every global position held exactly once, the stated chunk rule, shard/unshard.
#include <gtest/gtest.h>

#include <algorithm>

#include "attnkit/dist.hpp"
#include "attnkit/error.hpp"
#include "support/testing.hpp"

namespace attnkit::dist {
namespace {

TEST(DistLayout, EveryPositionHeldOnceForAnyLengthAndRankCount) {
  for (Layout layout : {Layout::contiguous, Layout::zigzag})
    for (int P : {1, 2, 3, 4, 7})
      for (std::int64_t N : {0, 1, 3, 7, 8, 37, 101, 256}) {
        SCOPED_TRACE(std::string(layout_name(layout)) + " P=" + std::to_string(P) + " N=" + std::to_string(N));
        std::vector<int> owner(static_cast<std::size_t>(N), -1);
        for (int r = 0; r < P; ++r) {
          const auto pos = global_positions(layout, N, r, P);
          EXPECT_EQ(static_cast<std::int64_t>(pos.size()), local_length(layout, N, r, P));
          for (std::int64_t g : pos) {
            ASSERT_TRUE(g >= 0 && g < N);
            EXPECT_EQ(owner[static_cast<std::size_t>(g)], -1) << "position " << g << " held twice";
            owner[static_cast<std::size_t>(g)] = r;
          }
        }
        EXPECT_TRUE(std::none_of(owner.begin(), owner.end(), [](int o) { return o < 0; }));
      }
}

TEST(DistLayout, ZigzagHoldsChunksRAndItsMirrorLongerChunksFirst) {
  // N = 10 over 2 ranks: 4 chunks of 3, 3, 2, 2 (the first 10 mod 4 = 2 are one longer).
  EXPECT_EQ(global_positions(Layout::zigzag, 10, 0, 2), (std::vector<std::int64_t>{0, 1, 2, 8, 9}));
  EXPECT_EQ(global_positions(Layout::zigzag, 10, 1, 2), (std::vector<std::int64_t>{3, 4, 5, 6, 7}));
  EXPECT_EQ(global_positions(Layout::contiguous, 10, 1, 3), (std::vector<std::int64_t>{4, 5, 6}));
  const auto c = chunks(Layout::zigzag, 10, 1, 2);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[1].global_start, 6);
  EXPECT_EQ(c[1].length, 2);
  EXPECT_EQ(c[1].local_start, 3);
}

TEST(DistLayout, ZigzagBalancesCausalWork) {
  // Causal work of a rank: the number of (query, key) pairs with key <= query among its queries.
  const std::int64_t N = 64;
  const int P = 4;
  std::vector<std::int64_t> work;
  for (int r = 0; r < P; ++r) {
    std::int64_t w = 0;
    for (std::int64_t g : global_positions(Layout::zigzag, N, r, P)) w += g + 1;
    work.push_back(w);
  }
  EXPECT_EQ(*std::min_element(work.begin(), work.end()), *std::max_element(work.begin(), work.end()));
}

TEST(DistLayout, ShardThenUnshardRestoresTheFullTensor) {
  testing::Rng rng(11);
  const Tensor full = testing::random_tensor(rng, {2, 3, 37, 5}, DType::f32);
  const Tensor lse = testing::random_tensor(rng, {2, 3, 37}, DType::f32);
  for (Layout layout : {Layout::contiguous, Layout::zigzag}) {
    Tensor back = testing::poisoned(DType::f32, {2, 3, 37, 5}), lse_back = testing::poisoned(DType::f32, {2, 3, 37});
    for (int r = 0; r < 4; ++r) {
      unshard(shard(full.view(), layout, r, 4).view(), back.view(), layout, r, 4);
      unshard(shard(lse.view(), layout, r, 4).view(), lse_back.view(), layout, r, 4);
    }
    EXPECT_TRUE(testing::bitwise_equal(back, full));
    EXPECT_TRUE(testing::bitwise_equal(lse_back, lse));
  }
}

TEST(DistLayout, BadArgumentsRaise) {
  EXPECT_THROW(chunks(Layout::zigzag, 10, 2, 2), Error);
  EXPECT_THROW(chunks(Layout::zigzag, -1, 0, 2), Error);
  Tensor t(DType::f32, {2, 3});
  EXPECT_THROW(shard(t.view(), Layout::zigzag, 0, 2), Error);
  Tensor full(DType::f32, {1, 1, 10, 2}), wrong(DType::f32, {1, 1, 4, 2});
  try {
    unshard(wrong.view(), full.view(), Layout::zigzag, 0, 2);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_shape);
    EXPECT_NE(std::string(e.what()).find("gives it 5 rows"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace attnkit::dist
