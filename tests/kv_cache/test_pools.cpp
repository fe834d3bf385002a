// The KV cache's pools (src/kv_cache/pools.hpp): the head-major storage seen as [blocks, Hkv,
// block_size, d], rows written through a block table and gathered back in order, across block
// boundaries, for plain and quantized storage.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "attnkit/quantized.hpp"
#include "kv_cache/pools.hpp"

namespace attnkit {
namespace {

// A distinct, exactly representable value per (entry, head, token, feature).
float value_at(std::int64_t b, std::int64_t g, std::int64_t token, std::int64_t c) {
  return static_cast<float>(b * 1000 + g * 100 + token * 10 + c) / 8.0f;
}

Tensor new_rows(std::int64_t count, std::int64_t heads, std::int64_t t, std::int64_t width) {
  Tensor rows(DType::f32, {count, heads, t, width});
  for (std::int64_t b = 0; b < count; ++b)
    for (std::int64_t g = 0; g < heads; ++g)
      for (std::int64_t token = 0; token < t; ++token)
        for (std::int64_t c = 0; c < width; ++c) *rows.view().at<float>({b, g, token, c}) = value_at(b, g, token, c);
  return rows;
}

TEST(KVCachePools, TheStorageIsHeadMajorSeenBlockMajor) {
  Tensor storage = detail::make_pool(DType::f32, 2, 3, 4, 5);
  ASSERT_EQ(storage.shape(), (std::vector<std::int64_t>{2, 3, 4, 5}));
  const TensorView view = detail::pool(storage, 5);
  EXPECT_EQ(view.size(0), 3);  // blocks
  EXPECT_EQ(view.size(1), 2);  // heads
  // Block 1 of head 1 starts one head's blocks (3 × 4 rows of 5) past head 0.
  const float* base = static_cast<const float*>(storage.raw());
  EXPECT_EQ(view.at<float>({1, 1, 2, 3}), base + (1 * 3 * 4 + 1 * 4 + 2) * 5 + 3);
}

TEST(KVCachePools, QuantizedPoolsHoldRowRecords) {
  Tensor storage = detail::make_pool(DType::int8, 2, 3, 4, 64);
  const std::int64_t record = quantized_row_bytes(DType::int8, 64);
  ASSERT_EQ(storage.shape(), (std::vector<std::int64_t>{2, 3, 4, record}));
  const TensorView view = detail::pool(storage, 64);
  EXPECT_EQ(view.size(3), 64);
  EXPECT_EQ(view.stride(2), record);
  EXPECT_EQ(view.stride(1), 3 * 4 * record);
}

TEST(KVCachePools, RowsWrittenThroughATableGatherBackInOrder) {
  constexpr std::int64_t heads = 2, block_size = 4, dk = 3, dv = 2;
  Tensor keys = detail::make_pool(DType::f32, heads, 5, block_size, dk);
  Tensor values = detail::make_pool(DType::f32, heads, 5, block_size, dv);
  const std::vector<std::int64_t> table{3, 0, 4};  // out of order, to see the table is followed
  // Two appends, of 3 then 6 tokens: the second crosses two block boundaries. Entry 1 of the batch.
  const Tensor k1 = new_rows(2, heads, 3, dk), v1 = new_rows(2, heads, 3, dv);
  const Tensor k2 = new_rows(2, heads, 6, dk), v2 = new_rows(2, heads, 6, dv);
  detail::write_rows(k1.view(), v1.view(), 1, table, block_size, 0, detail::pool(keys, dk), detail::pool(values, dv));
  detail::write_rows(k2.view(), v2.view(), 1, table, block_size, 3, detail::pool(keys, dk), detail::pool(values, dv));

  // Row 5 of the sequence is token 2 of the second append, in block table[1] = 0, slot 1.
  EXPECT_EQ(*detail::pool(keys, dk).at<float>({0, 1, 1, 2}), value_at(1, 1, 2, 2));
  const Tensor got_k = detail::gather(detail::pool(std::as_const(keys), dk), table, block_size, 9);
  const Tensor got_v = detail::gather(detail::pool(std::as_const(values), dv), table, block_size, 9);
  ASSERT_EQ(got_k.shape(), (std::vector<std::int64_t>{heads, 9, dk}));
  ASSERT_EQ(got_v.shape(), (std::vector<std::int64_t>{heads, 9, dv}));
  for (std::int64_t g = 0; g < heads; ++g)
    for (std::int64_t j = 0; j < 9; ++j) {
      const std::int64_t token = j < 3 ? j : j - 3;
      for (std::int64_t c = 0; c < dk; ++c) EXPECT_EQ(*got_k.view().at<float>({g, j, c}), value_at(1, g, token, c));
      for (std::int64_t c = 0; c < dv; ++c) EXPECT_EQ(*got_v.view().at<float>({g, j, c}), value_at(1, g, token, c));
    }
}

TEST(KVCachePools, QuantizedRowsGatherAsTheStoredValuesInFloat64) {
  constexpr std::int64_t width = 32, block_size = 2;
  Tensor keys = detail::make_pool(DType::int8, 1, 2, block_size, width);
  Tensor values = detail::make_pool(DType::int8, 1, 2, block_size, width);
  const std::vector<std::int64_t> table{1, 0};
  const Tensor rows = new_rows(1, 1, 3, width);
  detail::write_rows(rows.view(), rows.view(), 0, table, block_size, 0, detail::pool(keys, width), detail::pool(values, width));
  const Tensor got = detail::gather(detail::pool(std::as_const(keys), width), table, block_size, 3);
  ASSERT_EQ(got.dtype(), DType::f64);
  for (std::int64_t j = 0; j < 3; ++j) {
    // What quantising the row gives, dequantised: the gather returns exactly the stored values.
    std::vector<float> row(width);
    for (std::int64_t c = 0; c < width; ++c) row[static_cast<std::size_t>(c)] = value_at(0, 0, j, c);
    std::vector<std::byte> record(static_cast<std::size_t>(quantized_row_bytes(DType::int8, width)));
    quantize_row(row.data(), width, DType::int8, record.data());
    std::vector<double> expected(width);
    dequantize_row(record.data(), width, DType::int8, 0, width, expected.data());
    for (std::int64_t c = 0; c < width; ++c) EXPECT_EQ(*got.view().at<double>({0, j, c}), expected[static_cast<std::size_t>(c)]);
  }
}

}  // namespace
}  // namespace attnkit
