// Staging between caller views and the ring's float32 buffers (see staging.hpp).
#include "dist/staging.hpp"

#include <cstddef>

namespace attnkit::dist::detail {

namespace {

// Calls f(offset in elements, flat index) for every element of a view of rank 3 or 4, in C order.
template <class F>
void for_each_element(const std::array<std::int64_t, kMaxViewRank>& sizes, const std::array<std::int64_t, kMaxViewRank>& strides,
                      int rank, F&& f) {
  const std::int64_t width = rank == 4 ? sizes[3] : 1, wstride = rank == 4 ? strides[3] : 0;
  std::int64_t flat = 0;
  for (std::int64_t a = 0; a < sizes[0]; ++a)
    for (std::int64_t b = 0; b < sizes[1]; ++b)
      for (std::int64_t i = 0; i < sizes[2]; ++i)
        for (std::int64_t c = 0; c < width; ++c) f(a * strides[0] + b * strides[1] + i * strides[2] + c * wstride, flat++);
}

}  // namespace

void store(const Tensor& src, TensorView dst) {
  const float* from = src.data<float>();
  const std::int64_t elem = static_cast<std::int64_t>(dtype_size(dst.dtype()));
  auto* base = static_cast<std::byte*>(dst.data());
  for_each_element(dst.sizes(), dst.strides(), dst.rank(), [&](std::int64_t offset, std::int64_t flat) {
    store_from_double(base + offset * elem, dst.dtype(), from[flat]);
  });
}

namespace {

void copy_to_f32(ConstTensorView src, float* to) {
  const std::int64_t elem = static_cast<std::int64_t>(dtype_size(src.dtype()));
  const auto* base = static_cast<const std::byte*>(src.data());
  for_each_element(src.sizes(), src.strides(), src.rank(), [&](std::int64_t offset, std::int64_t flat) {
    to[flat] = static_cast<float>(load_as_double(base + offset * elem, src.dtype()));
  });
}

}  // namespace

void BlockBuffer::pack(ConstTensorView k, ConstTensorView v) {
  copy_to_f32(k, data_.data());
  copy_to_f32(v, data_.data() + B_ * Hkv_ * k.size(2) * dk_);
}

void add_rows(TensorView dst, std::int64_t dst_start, ConstTensorView src) {
  for (std::int64_t a = 0; a < src.size(0); ++a)
    for (std::int64_t b = 0; b < src.size(1); ++b)
      for (std::int64_t i = 0; i < src.size(2); ++i) {
        float* to = dst.at<float>({a, b, dst_start + i, 0});
        const float* from = src.at<float>({a, b, i, 0});
        for (std::int64_t c = 0; c < src.size(3); ++c) to[c * dst.stride(3)] += from[c * src.stride(3)];
      }
}

}  // namespace attnkit::dist::detail
