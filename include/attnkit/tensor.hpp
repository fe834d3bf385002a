// attnkit — tensor views and a small owning tensor.
//
// A view is a pointer, a dtype, and up to four sizes with element strides. Attention takes views in
// the logical order [batch, heads, seq, dim]; any strides are accepted, so memory laid out as
// [batch, seq, heads, dim] is passed as a permuted view, without a copy:
//
//   auto q = attnkit::TensorView::contiguous(ptr, DType::f32, {B, S, H, D}).permuted({0, 2, 1, 3});
//
// Views never own memory. A Tensor owns 64-byte-aligned, zero-initialised, contiguous storage.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "attnkit/dtype.hpp"

namespace attnkit {

inline constexpr int kMaxViewRank = 4;

template <bool Mutable>
class BasicTensorView {
 public:
  using Pointer = std::conditional_t<Mutable, void*, const void*>;

  BasicTensorView() = default;
  // A strided view: sizes and strides (in elements, may be zero or negative) of equal length <= 4.
  BasicTensorView(Pointer data, DType dtype, std::initializer_list<std::int64_t> sizes,
                  std::initializer_list<std::int64_t> strides);
  BasicTensorView(Pointer data, DType dtype, const std::int64_t* sizes, const std::int64_t* strides,
                  int rank);
  // A row-major (C order) view.
  static BasicTensorView contiguous(Pointer data, DType dtype, std::initializer_list<std::int64_t> sizes);
  static BasicTensorView contiguous(Pointer data, DType dtype, const std::int64_t* sizes, int rank);

  // A mutable view converts to a const one.
  template <bool M = Mutable, class = std::enable_if_t<!M>>
  BasicTensorView(const BasicTensorView<true>& other)  // NOLINT(google-explicit-constructor)
      : data_(other.data()), dtype_(other.dtype()), rank_(other.rank()), sizes_(other.sizes()),
        strides_(other.strides()) {}

  Pointer data() const { return data_; }
  DType dtype() const { return dtype_; }
  int rank() const { return rank_; }
  std::int64_t size(int dim) const { return sizes_[static_cast<std::size_t>(dim)]; }
  std::int64_t stride(int dim) const { return strides_[static_cast<std::size_t>(dim)]; }
  const std::array<std::int64_t, kMaxViewRank>& sizes() const { return sizes_; }
  const std::array<std::int64_t, kMaxViewRank>& strides() const { return strides_; }
  std::int64_t numel() const;  // product of sizes (1 for rank 0); assumes it fits (validation checks)

  // The same memory with dimensions reordered: result.size(i) == size(order[i]).
  BasicTensorView permuted(std::initializer_list<int> order) const;
  // The same memory with leading size-1 dimensions added up to `rank` (e.g. [n, m] -> [1, 1, n, m]).
  BasicTensorView unsqueezed_to(int rank) const;

  // Typed pointer to element at logical index `idx` (length rank()); no bounds checks.
  template <class T>
  auto* at(std::initializer_list<std::int64_t> idx) const {
    std::int64_t offset = 0;
    int d = 0;
    for (std::int64_t i : idx) offset += i * strides_[static_cast<std::size_t>(d++)];
    using Elem = std::conditional_t<Mutable, T, const T>;
    return static_cast<Elem*>(data_) + offset;
  }

  std::string shape_string() const;  // "[2, 8, 128, 64]"

 private:
  Pointer data_ = nullptr;
  DType dtype_ = DType::f32;
  int rank_ = 0;
  std::array<std::int64_t, kMaxViewRank> sizes_{};
  std::array<std::int64_t, kMaxViewRank> strides_{};
};

using TensorView = BasicTensorView<true>;
using ConstTensorView = BasicTensorView<false>;

// An owning, contiguous (C order), zero-initialised tensor of any rank with 64-byte-aligned storage.
// A default-constructed Tensor is empty: no storage, numel() == 0 (unlike a rank-0 tensor built
// with shape {}, which holds one element).
class Tensor {
 public:
  Tensor() = default;
  Tensor(DType dtype, std::vector<std::int64_t> shape);  // throws Error on negative or overflowing sizes
  // Copies are deep, like std::vector's; moves take the storage.
  Tensor(const Tensor& other);
  Tensor& operator=(const Tensor& other);
  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(Tensor&&) noexcept = default;

  DType dtype() const { return dtype_; }
  const std::vector<std::int64_t>& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  std::int64_t numel() const { return numel_; }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel_) * dtype_size(dtype_); }

  void* raw() { return storage_.get(); }
  const void* raw() const { return storage_.get(); }
  template <class T>
  T* data() { check_type(dtype_of<T>()); return static_cast<T*>(raw()); }
  template <class T>
  const T* data() const { check_type(dtype_of<T>()); return static_cast<const T*>(raw()); }

  // Views of rank() (must be <= 4); view4() prepends size-1 dimensions to reach rank 4.
  TensorView view();
  ConstTensorView view() const;
  TensorView view4();
  ConstTensorView view4() const;

  // A copy of `src` (any strides, any floating dtype) converted to `dtype`, contiguous.
  static Tensor converted(ConstTensorView src, DType dtype);

 private:
  struct AlignedFree {
    void operator()(void* p) const noexcept;
  };
  void check_type(DType requested) const;

  DType dtype_ = DType::f32;
  std::vector<std::int64_t> shape_;
  std::int64_t numel_ = 0;
  std::unique_ptr<void, AlignedFree> storage_;
};

// Element conversion used across the library: read any floating element as double, and write a
// double to any floating element (rounding to nearest even for f32/f16/bf16).
double load_as_double(const void* element, DType dtype) noexcept;
void store_from_double(void* element, DType dtype, double value) noexcept;

}  // namespace attnkit
