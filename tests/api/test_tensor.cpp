// Views and the owning Tensor.
#include <gtest/gtest.h>

#include <cstdint>

#include "attnkit/error.hpp"
#include "attnkit/tensor.hpp"

namespace attnkit {
namespace {

TEST(TensorView, ContiguousStridesAndShapeString) {
  float data[2 * 3 * 4 * 5];
  const TensorView v = TensorView::contiguous(data, DType::f32, {2, 3, 4, 5});
  EXPECT_EQ(v.rank(), 4);
  EXPECT_EQ(v.stride(0), 60);
  EXPECT_EQ(v.stride(3), 1);
  EXPECT_EQ(v.numel(), 120);
  EXPECT_EQ(v.shape_string(), "[2, 3, 4, 5]");
}

TEST(TensorView, PermutedSeesSequenceMajorMemoryInLogicalOrder) {
  // Memory [B=2, S=3, H=4, D=5] viewed as [B, H, S, D].
  float data[2 * 3 * 4 * 5];
  for (int i = 0; i < 120; ++i) data[i] = static_cast<float>(i);
  const TensorView bhsd = TensorView::contiguous(data, DType::f32, {2, 3, 4, 5}).permuted({0, 2, 1, 3});
  EXPECT_EQ(bhsd.shape_string(), "[2, 4, 3, 5]");
  // Element (b=1, h=2, s=1, d=3) lives at ((1·3 + 1)·4 + 2)·5 + 3 in [B, S, H, D] memory.
  EXPECT_EQ(*bhsd.at<float>({1, 2, 1, 3}), static_cast<float>(((1 * 3 + 1) * 4 + 2) * 5 + 3));
  EXPECT_THROW(bhsd.permuted({0, 0, 1, 2}), Error);
  EXPECT_THROW(bhsd.permuted({0, 1, 2}), Error);
}

TEST(TensorView, UnsqueezedPrependsBroadcastDimensions) {
  bool mask[12] = {};
  const ConstTensorView v = ConstTensorView::contiguous(mask, DType::boolean, {3, 4}).unsqueezed_to(4);
  EXPECT_EQ(v.shape_string(), "[1, 1, 3, 4]");
  EXPECT_EQ(v.stride(2), 4);
  EXPECT_THROW(v.unsqueezed_to(2), Error);
  EXPECT_THROW(TensorView::contiguous(nullptr, DType::f32, {1, 1, 1, 1, 1}), Error);
}

TEST(Tensor, ZeroInitialisedAlignedAndDeepCopied) {
  Tensor t(DType::f32, {3, 5, 7});
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.raw()) % 64, 0u);
  for (std::int64_t i = 0; i < t.numel(); ++i) EXPECT_EQ(t.data<float>()[i], 0.0f);
  t.data<float>()[4] = 2.5f;
  Tensor copy = t;
  copy.data<float>()[4] = 1.0f;
  EXPECT_EQ(t.data<float>()[4], 2.5f);
  EXPECT_THROW(t.data<double>(), Error);
  EXPECT_EQ(Tensor(DType::f64, {0, 3}).numel(), 0);
  EXPECT_NE(Tensor(DType::f64, {0, 3}).raw(), nullptr);
}

TEST(Tensor, RejectsNegativeAndOverflowingShapes) {
  EXPECT_THROW(Tensor(DType::f32, {2, -1}), Error);
  try {
    Tensor(DType::f32, {std::int64_t{1} << 40, std::int64_t{1} << 40});
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::size_overflow);
  }
}

TEST(Tensor, ConvertedCopiesAnyStridesWithRounding) {
  Tensor t(DType::f64, {2, 3});
  for (int i = 0; i < 6; ++i) t.data<double>()[i] = 1.0 + i / 3.0;
  const Tensor transposed = Tensor::converted(t.view().permuted({1, 0}), DType::f32);
  ASSERT_EQ(transposed.shape(), (std::vector<std::int64_t>{3, 2}));
  EXPECT_EQ(transposed.data<float>()[1], static_cast<float>(t.data<double>()[3]));  // (0, 1) <- (1, 0)
  EXPECT_THROW(Tensor::converted(Tensor(DType::i32, {2}).view(), DType::f32), Error);
}

}  // namespace
}  // namespace attnkit
