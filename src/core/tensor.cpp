// Tensor views and the owning Tensor.
#include "attnkit/tensor.hpp"

#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <sstream>

#include "attnkit/error.hpp"
#include "core/memory.hpp"

namespace attnkit {

namespace {

constexpr std::size_t kStorageAlignment = 64;  // one cache line; what AVX-512 loads like best

void check_rank(int rank) {
  if (rank < 0 || rank > kMaxViewRank) {
    throw Error(ErrorCode::invalid_shape,
                "tensor view: rank " + std::to_string(rank) + " is not supported (0 to 4 dimensions)");
  }
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string text = "[";
  for (std::size_t d = 0; d < shape.size(); ++d) text += (d ? ", " : "") + std::to_string(shape[d]);
  return text + "]";
}

}  // namespace

template <bool Mutable>
BasicTensorView<Mutable>::BasicTensorView(Pointer data, DType dtype, const std::int64_t* sizes,
                                          const std::int64_t* strides, int rank)
    : data_(data), dtype_(dtype), rank_(rank) {
  check_rank(rank);
  for (int d = 0; d < rank; ++d) {
    sizes_[static_cast<std::size_t>(d)] = sizes[d];
    strides_[static_cast<std::size_t>(d)] = strides[d];
  }
}

template <bool Mutable>
BasicTensorView<Mutable>::BasicTensorView(Pointer data, DType dtype, std::initializer_list<std::int64_t> sizes,
                                          std::initializer_list<std::int64_t> strides)
    : data_(data), dtype_(dtype), rank_(static_cast<int>(sizes.size())) {
  check_rank(rank_);
  if (strides.size() != sizes.size()) {
    throw Error(ErrorCode::invalid_shape, "tensor view: " + std::to_string(sizes.size()) + " sizes but " +
                                              std::to_string(strides.size()) + " strides");
  }
  std::size_t d = 0;
  for (std::int64_t s : sizes) sizes_[d++] = s;
  d = 0;
  for (std::int64_t s : strides) strides_[d++] = s;
}

template <bool Mutable>
BasicTensorView<Mutable> BasicTensorView<Mutable>::contiguous(Pointer data, DType dtype, const std::int64_t* sizes,
                                                              int rank) {
  check_rank(rank);
  std::int64_t strides[kMaxViewRank] = {};
  std::int64_t stride = 1;
  for (int d = rank - 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= sizes[d] > 0 ? sizes[d] : 1;
  }
  return BasicTensorView(data, dtype, sizes, strides, rank);
}

template <bool Mutable>
BasicTensorView<Mutable> BasicTensorView<Mutable>::contiguous(Pointer data, DType dtype,
                                                              std::initializer_list<std::int64_t> sizes) {
  return contiguous(data, dtype, sizes.begin(), static_cast<int>(sizes.size()));
}

template <bool Mutable>
std::int64_t BasicTensorView<Mutable>::numel() const {
  std::int64_t count = 1;
  for (int d = 0; d < rank_; ++d) count *= sizes_[static_cast<std::size_t>(d)];
  return count;
}

template <bool Mutable>
BasicTensorView<Mutable> BasicTensorView<Mutable>::permuted(std::initializer_list<int> order) const {
  if (static_cast<int>(order.size()) != rank_) {
    throw Error(ErrorCode::invalid_shape, "permuted: " + std::to_string(order.size()) +
                                              " axes given for a view of rank " + std::to_string(rank_));
  }
  std::int64_t sizes[kMaxViewRank] = {}, strides[kMaxViewRank] = {};
  bool used[kMaxViewRank] = {};
  int d = 0;
  for (int axis : order) {
    if (axis < 0 || axis >= rank_ || used[axis]) {
      throw Error(ErrorCode::invalid_shape, "permuted: the axes must be a permutation of 0.." +
                                                std::to_string(rank_ - 1) + " for a view of shape " + shape_string());
    }
    used[axis] = true;
    sizes[d] = sizes_[static_cast<std::size_t>(axis)];
    strides[d] = strides_[static_cast<std::size_t>(axis)];
    ++d;
  }
  return BasicTensorView(data_, dtype_, sizes, strides, rank_);
}

template <bool Mutable>
BasicTensorView<Mutable> BasicTensorView<Mutable>::unsqueezed_to(int rank) const {
  check_rank(rank);
  if (rank < rank_) {
    throw Error(ErrorCode::invalid_shape, "unsqueezed_to: cannot reduce a view of shape " + shape_string() +
                                              " to rank " + std::to_string(rank));
  }
  const int extra = rank - rank_;
  std::int64_t sizes[kMaxViewRank] = {}, strides[kMaxViewRank] = {};
  for (int d = 0; d < extra; ++d) sizes[d] = 1;  // stride 0: a size-1 dimension is never stepped
  for (int d = 0; d < rank_; ++d) {
    sizes[extra + d] = sizes_[static_cast<std::size_t>(d)];
    strides[extra + d] = strides_[static_cast<std::size_t>(d)];
  }
  return BasicTensorView(data_, dtype_, sizes, strides, rank);
}

template <bool Mutable>
std::string BasicTensorView<Mutable>::shape_string() const {
  std::ostringstream s;
  s << '[';
  for (int d = 0; d < rank_; ++d) s << (d ? ", " : "") << sizes_[static_cast<std::size_t>(d)];
  s << ']';
  return s.str();
}

template class BasicTensorView<true>;
template class BasicTensorView<false>;

// ---- Tensor ----

void Tensor::AlignedFree::operator()(void* p) const noexcept { std::free(p); }

Tensor::Tensor(DType dtype, std::vector<std::int64_t> shape) : dtype_(dtype), shape_(std::move(shape)) {
  std::int64_t count = 1;
  for (std::int64_t s : shape_) {
    if (s < 0) {
      throw Error(ErrorCode::invalid_shape, "Tensor: negative size in shape " + shape_text(shape_));
    }
    if (s != 0 && count > std::numeric_limits<std::int64_t>::max() / s) {
      throw Error(ErrorCode::size_overflow, "Tensor: the number of elements of shape " + shape_text(shape_) + " overflows 64 bits");
    }
    count *= s;
  }
  const std::int64_t elem = static_cast<std::int64_t>(dtype_size(dtype));
  if (count > std::numeric_limits<std::int64_t>::max() / elem - static_cast<std::int64_t>(kStorageAlignment)) {
    throw Error(ErrorCode::size_overflow, "Tensor: the byte size of shape " + shape_text(shape_) + " overflows 64 bits");
  }
  numel_ = count;
  // aligned_alloc wants a multiple of the alignment; never ask for 0 bytes so raw() is never null.
  std::size_t bytes = static_cast<std::size_t>(count * elem);
  bytes = (bytes + kStorageAlignment - 1) / kStorageAlignment * kStorageAlignment;
  if (bytes == 0) bytes = kStorageAlignment;
  detail::require_memory(bytes, [&] { return "Tensor " + std::string(dtype_name(dtype)) + " " + shape_text(shape_); });
  void* p = std::aligned_alloc(kStorageAlignment, bytes);
  if (p == nullptr) {
    throw Error(ErrorCode::out_of_memory, "Tensor " + std::string(dtype_name(dtype)) + " " + shape_text(shape_) +
                                              ": cannot allocate " + detail::human_bytes(bytes));
  }
  std::memset(p, 0, bytes);
  storage_.reset(p);
}

Tensor::Tensor(const Tensor& other) : Tensor(other.dtype_, other.shape_) {
  std::memcpy(raw(), other.raw(), nbytes());
}

Tensor& Tensor::operator=(const Tensor& other) {
  if (this != &other) *this = Tensor(other);
  return *this;
}

void Tensor::check_type(DType requested) const {
  if (requested != dtype_) {
    throw Error(ErrorCode::invalid_dtype, "Tensor::data: requested " + std::string(dtype_name(requested)) +
                                              " from a tensor of dtype " + std::string(dtype_name(dtype_)));
  }
}

TensorView Tensor::view() {
  return TensorView::contiguous(raw(), dtype_, shape_.data(), rank());
}
ConstTensorView Tensor::view() const {
  return ConstTensorView::contiguous(raw(), dtype_, shape_.data(), rank());
}
TensorView Tensor::view4() { return view().unsqueezed_to(4); }
ConstTensorView Tensor::view4() const { return view().unsqueezed_to(4); }

Tensor Tensor::converted(ConstTensorView src, DType dtype) {
  if (!is_floating(src.dtype()) || !is_floating(dtype)) {
    throw Error(ErrorCode::invalid_dtype, "Tensor::converted: converts between floating dtypes only, not " +
                                              std::string(dtype_name(src.dtype())) + " to " +
                                              std::string(dtype_name(dtype)));
  }
  Tensor result(dtype, std::vector<std::int64_t>(src.sizes().begin(), src.sizes().begin() + src.rank()));
  const std::size_t in_size = dtype_size(src.dtype()), out_size = dtype_size(dtype);
  auto* dst = static_cast<std::byte*>(result.raw());
  const auto* base = static_cast<const std::byte*>(src.data());
  std::array<std::int64_t, kMaxViewRank> idx{};
  for (std::int64_t flat = 0; flat < result.numel(); ++flat) {
    std::int64_t offset = 0;
    for (int d = 0; d < src.rank(); ++d) offset += idx[static_cast<std::size_t>(d)] * src.stride(d);
    const double value = load_as_double(base + offset * static_cast<std::int64_t>(in_size), src.dtype());
    store_from_double(dst + flat * static_cast<std::int64_t>(out_size), dtype, value);
    for (int d = src.rank() - 1; d >= 0; --d) {  // odometer increment, last dimension fastest
      if (++idx[static_cast<std::size_t>(d)] < src.size(d)) break;
      idx[static_cast<std::size_t>(d)] = 0;
    }
  }
  return result;
}

namespace {

// Double -> float rounded to odd (truncate, then set the last bit if anything was cut off). Rounding
// that float to a format with at least two fewer bits (f16: 11, bf16: 8) then gives the correctly
// rounded result; plain double -> float -> 16-bit rounding would round twice and can miss ties.
float round_to_odd_float(double value) {
  float f = static_cast<float>(value);
  if (!std::isfinite(f) || static_cast<double>(f) == value) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(value)) f = std::nextafter(f, 0.0f);  // truncate
  return std::bit_cast<float>(std::bit_cast<std::uint32_t>(f) | 1u);
}

}  // namespace

double load_as_double(const void* element, DType dtype) noexcept {
  switch (dtype) {
    case DType::f64: { double x; std::memcpy(&x, element, sizeof x); return x; }
    case DType::f32: { float x; std::memcpy(&x, element, sizeof x); return x; }
    case DType::f16: { float16 x; std::memcpy(&x.bits, element, 2); return to_float(x); }
    case DType::bf16: { bfloat16 x; std::memcpy(&x.bits, element, 2); return to_float(x); }
    case DType::boolean: return *static_cast<const unsigned char*>(element) != 0 ? 1.0 : 0.0;
    case DType::i32: { std::int32_t x; std::memcpy(&x, element, sizeof x); return x; }
    case DType::i64: { std::int64_t x; std::memcpy(&x, element, sizeof x); return static_cast<double>(x); }
    case DType::int8: case DType::int4: case DType::fp8_e4m3: case DType::fp8_e5m2: return std::nan("");  // rows, not elements: read with dequantize_row
  }
  return 0.0;
}

void store_from_double(void* element, DType dtype, double value) noexcept {
  switch (dtype) {
    case DType::f64: std::memcpy(element, &value, sizeof value); return;
    case DType::f32: { const float x = static_cast<float>(value); std::memcpy(element, &x, sizeof x); return; }
    case DType::f16: { const float16 x = to_float16(round_to_odd_float(value)); std::memcpy(element, &x.bits, 2); return; }
    case DType::bf16: { const bfloat16 x = to_bfloat16(round_to_odd_float(value)); std::memcpy(element, &x.bits, 2); return; }
    case DType::boolean: *static_cast<unsigned char*>(element) = value != 0.0 ? 1 : 0; return;
    case DType::i32: { const auto x = static_cast<std::int32_t>(value); std::memcpy(element, &x, sizeof x); return; }
    case DType::i64: { const auto x = static_cast<std::int64_t>(value); std::memcpy(element, &x, sizeof x); return; }
    case DType::int8: case DType::int4: case DType::fp8_e4m3: case DType::fp8_e5m2: return;  // rows, not elements: written with quantize_row
  }
}

}  // namespace attnkit
