/// \file
/// Tensor views and a small owning tensor.
///
/// A view is a pointer, a dtype, and up to four sizes with element strides. Attention takes views in
/// the logical order [batch, heads, seq, dim]; any strides are accepted, so memory laid out as
/// [batch, seq, heads, dim] is passed as a permuted view, without a copy:
/// \code
///   auto q = attnkit::TensorView::contiguous(ptr, DType::f32, {B, S, H, D}).permuted({0, 2, 1, 3});
/// \endcode
/// Views never own memory. A Tensor owns 64-byte-aligned, zero-initialised, contiguous storage.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "attnkit/dtype.hpp"

namespace attnkit {

/// The most dimensions a view has.
inline constexpr int kMaxViewRank = 4;

/// A non-owning strided view of up to kMaxViewRank dimensions: a data pointer, a dtype, sizes and
/// strides in elements. Use the aliases TensorView (writable) and ConstTensorView (read-only).
/// \tparam Mutable whether the data may be written through the view
template <bool Mutable>
class BasicTensorView {
 public:
  /// The data pointer type: void* for a mutable view, const void* otherwise.
  using Pointer = std::conditional_t<Mutable, void*, const void*>;

  /// An empty view: null data, f32, rank 0.
  BasicTensorView() = default;
  /// A strided view: sizes and strides (in elements, may be zero or negative) of equal length <= 4.
  BasicTensorView(Pointer data, DType dtype, std::initializer_list<std::int64_t> sizes,
                  std::initializer_list<std::int64_t> strides);
  /// A strided view from arrays of `rank` sizes and strides (in elements, may be zero or negative),
  /// rank <= 4.
  BasicTensorView(Pointer data, DType dtype, const std::int64_t* sizes, const std::int64_t* strides,
                  int rank);
  /// A row-major (C order) view.
  static BasicTensorView contiguous(Pointer data, DType dtype, std::initializer_list<std::int64_t> sizes);
  /// A row-major (C order) view from an array of `rank` sizes, rank <= 4.
  static BasicTensorView contiguous(Pointer data, DType dtype, const std::int64_t* sizes, int rank);

  /// A mutable view converts to a const one.
  template <bool M = Mutable, class = std::enable_if_t<!M>>
  BasicTensorView(const BasicTensorView<true>& other)  // NOLINT(google-explicit-constructor)
      : data_(other.data()), dtype_(other.dtype()), rank_(other.rank()), sizes_(other.sizes()),
        strides_(other.strides()) {}

  /// The address of the element at index 0 in every dimension.
  Pointer data() const { return data_; }
  /// The element type.
  DType dtype() const { return dtype_; }
  /// The number of dimensions, 0 to kMaxViewRank.
  int rank() const { return rank_; }
  /// The size of dimension `dim` (0 <= dim < rank(); not checked).
  std::int64_t size(int dim) const { return sizes_[static_cast<std::size_t>(dim)]; }
  /// The stride of dimension `dim` in elements (0 <= dim < rank(); not checked).
  std::int64_t stride(int dim) const { return strides_[static_cast<std::size_t>(dim)]; }
  /// All sizes; entries at rank() and beyond are unused.
  const std::array<std::int64_t, kMaxViewRank>& sizes() const { return sizes_; }
  /// All strides in elements; entries at rank() and beyond are unused.
  const std::array<std::int64_t, kMaxViewRank>& strides() const { return strides_; }
  /// The product of sizes (1 for rank 0); assumes it fits (validation checks).
  std::int64_t numel() const;

  /// The same memory with dimensions reordered: result.size(i) == size(order[i]).
  BasicTensorView permuted(std::initializer_list<int> order) const;
  /// The same memory with leading size-1 dimensions added up to `rank` (e.g. [n, m] -> [1, 1, n, m]).
  BasicTensorView unsqueezed_to(int rank) const;

  /// Typed pointer to element at logical index `idx` (length rank()); no bounds checks.
  /// \tparam T the C++ element type (not checked against dtype())
  template <class T>
  auto* at(std::initializer_list<std::int64_t> idx) const {
    std::int64_t offset = 0;
    int d = 0;
    for (std::int64_t i : idx) offset += i * strides_[static_cast<std::size_t>(d++)];
    using Elem = std::conditional_t<Mutable, T, const T>;
    return static_cast<Elem*>(data_) + offset;
  }

  /// The sizes as text, e.g. "[2, 8, 128, 64]".
  std::string shape_string() const;

 private:
  Pointer data_ = nullptr;
  DType dtype_ = DType::f32;
  int rank_ = 0;
  std::array<std::int64_t, kMaxViewRank> sizes_{};
  std::array<std::int64_t, kMaxViewRank> strides_{};
};

/// A view whose data may be written (outputs, gradients).
using TensorView = BasicTensorView<true>;
/// A read-only view (inputs); a TensorView converts to it.
using ConstTensorView = BasicTensorView<false>;

/// An owning, contiguous (C order), zero-initialised tensor of any rank with 64-byte-aligned storage.
/// A default-constructed Tensor is empty: no storage, numel() == 0 (unlike a rank-0 tensor built
/// with shape {}, which holds one element).
class Tensor {
 public:
  /// An empty tensor: no storage, numel() == 0.
  Tensor() = default;
  /// A zero-filled tensor of `dtype` and `shape`; throws Error on negative or overflowing sizes
  /// (and Error(out_of_memory) if the storage cannot be allocated).
  Tensor(DType dtype, std::vector<std::int64_t> shape);
  /// A deep copy, like std::vector's.
  Tensor(const Tensor& other);
  /// Replaces the contents with a deep copy of `other`.
  Tensor& operator=(const Tensor& other);
  /// Takes the storage of the moved-from tensor.
  Tensor(Tensor&&) noexcept = default;
  /// Takes the storage of the moved-from tensor.
  Tensor& operator=(Tensor&&) noexcept = default;

  /// The element type.
  DType dtype() const { return dtype_; }
  /// The sizes, one per dimension.
  const std::vector<std::int64_t>& shape() const { return shape_; }
  /// The number of dimensions.
  int rank() const { return static_cast<int>(shape_.size()); }
  /// The number of elements (1 for rank 0, 0 when empty).
  std::int64_t numel() const { return numel_; }
  /// The storage size in bytes.
  std::size_t nbytes() const { return static_cast<std::size_t>(numel_) * dtype_size(dtype_); }

  /// The storage (null when empty).
  void* raw() { return storage_.get(); }
  /// The storage (null when empty), read-only.
  const void* raw() const { return storage_.get(); }
  /// The storage as T*; raises Error(invalid_dtype) unless dtype_of<T>() is dtype().
  template <class T>
  T* data() { check_type(dtype_of<T>()); return static_cast<T*>(raw()); }
  /// The storage as const T*; raises Error(invalid_dtype) unless dtype_of<T>() is dtype().
  template <class T>
  const T* data() const { check_type(dtype_of<T>()); return static_cast<const T*>(raw()); }

  /// A view of rank() dimensions (must be <= 4).
  TensorView view();
  /// A read-only view of rank() dimensions (must be <= 4).
  ConstTensorView view() const;
  /// A view of rank 4: size-1 dimensions are prepended (rank() must be <= 4).
  TensorView view4();
  /// A read-only view of rank 4: size-1 dimensions are prepended (rank() must be <= 4).
  ConstTensorView view4() const;

  /// A copy of `src` (any strides, any floating dtype) converted to `dtype`, contiguous.
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

/// Reads any floating element as double (exactly).
double load_as_double(const void* element, DType dtype) noexcept;
/// Writes a double to any floating element, rounding to nearest even for f32/f16/bf16.
void store_from_double(void* element, DType dtype, double value) noexcept;

}  // namespace attnkit
