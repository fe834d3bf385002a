// Moving data between the caller's strided views of any storage dtype and the float32, contiguous
// buffers the ring computes on and sends.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "attnkit/tensor.hpp"

namespace attnkit::dist::detail {

// A contiguous float32 copy of any floating view.
inline Tensor to_f32(ConstTensorView t) { return Tensor::converted(t, DType::f32); }

// Writes a contiguous float32 tensor into a view of the same sizes and any floating dtype,
// rounding each element once.
void store(const Tensor& src, TensorView dst);

// Rows [start, start + length) of dimension 2 of a view: the same memory, no copy.
template <bool M>
BasicTensorView<M> rows(BasicTensorView<M> t, std::int64_t start, std::int64_t length) {
  std::array<std::int64_t, kMaxViewRank> sizes = t.sizes();
  sizes[2] = length;
  auto* base = static_cast<std::conditional_t<M, std::byte*, const std::byte*>>(t.data());
  return BasicTensorView<M>(base + start * t.stride(2) * static_cast<std::int64_t>(dtype_size(t.dtype())), t.dtype(),
                            sizes.data(), t.strides().data(), t.rank());
}

// A K/V block as it travels: K [B, Hkv, n, d_k] then V [B, Hkv, n, d_v], float32, contiguous, in
// one buffer sized for the longest block so that it can hold any rank's block.
class BlockBuffer {
 public:
  BlockBuffer(std::int64_t B, std::int64_t Hkv, std::int64_t max_rows, std::int64_t dk, std::int64_t dv)
      : B_(B), Hkv_(Hkv), dk_(dk), dv_(dv), data_(static_cast<std::size_t>(B * Hkv * max_rows * (dk + dv))) {}

  std::int64_t count(std::int64_t n) const { return B_ * Hkv_ * n * (dk_ + dv_); }  // floats of an n-row block
  float* data() { return data_.data(); }
  TensorView k(std::int64_t n) { return TensorView::contiguous(data_.data(), DType::f32, {B_, Hkv_, n, dk_}); }
  TensorView v(std::int64_t n) {
    return TensorView::contiguous(data_.data() + B_ * Hkv_ * n * dk_, DType::f32, {B_, Hkv_, n, dv_});
  }
  void zero(std::int64_t n) { std::fill(data_.begin(), data_.begin() + count(n), 0.0f); }
  // Copies an n-row K and V (any dtype, any strides) into the buffer as float32.
  void pack(ConstTensorView k, ConstTensorView v);

 private:
  std::int64_t B_, Hkv_, dk_, dv_;
  std::vector<float> data_;
};

// dst[b, h, dst_start + i, c] += src[b, h, i, c] over src's rows: both float32 rank-4 views.
void add_rows(TensorView dst, std::int64_t dst_start, ConstTensorView src);

}  // namespace attnkit::dist::detail
