// Tensor views decoded from fuzz input for fuzz_validation.cpp: any dtype, rank, sizes and strides,
// each backed by exactly the memory it can reach, or by none when the library must refuse it.
//
// The rule that keeps the fuzzer honest: a view the library accepts may be read and written in full,
// so every view that could be accepted owns a buffer covering its whole reach (ASan then flags any
// access outside it). Only views whose sizes are negative or whose element count or byte extent do
// not fit in 64 bits, which validation must refuse, get huge sizes and a token buffer. Views that
// are valid but would need more than kMaxBufferBytes are not made at all: they are legal, and their
// memory would have to exist.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "attnkit/dtype.hpp"
#include "attnkit/tensor.hpp"
#include "fuzz_support.hpp"

namespace attnkit::fuzz {

using Int128 = __int128;

inline constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();
inline constexpr std::int64_t kInt64Min = std::numeric_limits<std::int64_t>::min();
inline constexpr std::int64_t kMaxBufferBytes = std::int64_t{1} << 20;

// Sizes that break products: negative, at the edges of 64 bits, or large enough that two or three of
// them overflow together. A size byte of 0xF0 or more picks one of these.
inline constexpr std::array<std::int64_t, 16> kAbsurdSizes = {
    -1, -2, kInt64Min, kInt64Max, std::int64_t{1} << 31, std::int64_t{1} << 32, std::int64_t{1} << 40,
    std::int64_t{1} << 62, (std::int64_t{1} << 62) + 1, kInt64Max / 2 + 1, std::int64_t{1} << 21,
    std::int64_t{1} << 33, 3037000500 /* just above sqrt(2^63) */, std::int64_t{1} << 61, 65537, kInt64Max / 3};

// Mostly a size below `limit`; sometimes an absurd one.
inline std::int64_t decode_size(ByteReader& in, std::int64_t limit) {
  const std::uint8_t b = in.byte();
  if (b >= 0xF0) return kAbsurdSizes[b & 0x0F];
  return b % limit;
}

// Strides that are unusual: zero, negative, or large enough to overflow an extent.
inline constexpr std::array<std::int64_t, 16> kStrangeStrides = {
    0, -1, 2, -3, kInt64Min, kInt64Max, std::int64_t{1} << 62, -(std::int64_t{1} << 62), std::int64_t{1} << 32,
    std::int64_t{1} << 40, (std::int64_t{1} << 61) + 3, -(std::int64_t{1} << 40), 7, 1000, -1000, kInt64Max / 2};

// What a view needs, from its sizes and strides computed exactly.
enum class Reach {
  empty,        // no element: nothing may be touched
  small,        // a byte extent within kMaxBufferBytes: backed by a buffer of exactly that size
  must_reject,  // negative size, or an element count or byte extent past 64 bits
  large,        // valid but too big to back: replaced by a broadcast view (all strides 0)
};

struct Shape {
  int rank = 0;
  std::array<std::int64_t, kMaxViewRank> sizes{};
  std::array<std::int64_t, kMaxViewRank> strides{};
};

struct Extent {
  Reach reach = Reach::empty;
  std::int64_t low = 0, high = 0;  // element offsets reached below and above the data pointer
};

inline Extent extent_of(const Shape& s, DType dtype) {
  Extent e;
  for (int d = 0; d < s.rank; ++d) {
    if (s.sizes[d] < 0) return {Reach::must_reject};
  }
  for (int d = 0; d < s.rank; ++d) {
    if (s.sizes[d] == 0) return {Reach::empty};
  }
  Int128 count = 1;
  for (int d = 0; d < s.rank; ++d) {
    count *= s.sizes[d];  // at most 2^63 · 2^63 before the check below stops the loop
    if (count > kInt64Max) return {Reach::must_reject};
  }
  constexpr Int128 kBeyond = Int128{1} << 100;  // any reach past this is past 64 bits; keeps sums in range
  Int128 low = 0, high = 0;
  for (int d = 0; d < s.rank; ++d) {
    Int128 reach = Int128{s.sizes[d] - 1} * s.strides[d];
    if (reach > kBeyond) reach = kBeyond;
    if (reach < -kBeyond) reach = -kBeyond;
    (reach < 0 ? low : high) += reach;
  }
  const Int128 bytes = (high - low + 1) * static_cast<Int128>(dtype_size(dtype));
  if (bytes > kInt64Max) return {Reach::must_reject};
  if (bytes > kMaxBufferBytes) return {Reach::large};
  e.reach = Reach::small;
  e.low = static_cast<std::int64_t>(low);
  e.high = static_cast<std::int64_t>(high);
  return e;
}

// Row-major strides in the memory order `order` (order[0] outermost); a zero size counts as 1.
inline void set_strides_in_order(Shape& s, const std::array<int, kMaxViewRank>& order, std::int64_t inner = 1,
                                 std::int64_t row_padding = 0) {
  Int128 stride = inner;
  for (int i = s.rank - 1; i >= 0; --i) {
    const int d = order[static_cast<std::size_t>(i)];
    s.strides[d] = stride > kInt64Max ? kInt64Max : static_cast<std::int64_t>(stride);
    stride = stride * (s.sizes[d] > 0 ? s.sizes[d] : 1) + (i == s.rank - 1 ? row_padding : 0);
    if (stride > kInt64Max) stride = kInt64Max;
  }
}

// A view decoded from the input with memory that matches its Reach.
class FuzzView {
 public:
  FuzzView() = default;

  // dtype byte: below 0xE0 the expected dtype, else any DType. Shape byte: below 0xE0 the expected
  // sizes, else one perturbation (rank, one size, off by one). Layout byte: contiguous, another
  // memory order, padded, broadcast (zero strides), reversed (negative strides) or strange strides.
  static FuzzView decode(ByteReader& in, const std::vector<std::int64_t>& expected, DType expected_dtype) {
    FuzzView v;
    const std::uint8_t dtype_byte = in.byte();
    v.dtype_ = dtype_byte < 0xE0 ? expected_dtype : static_cast<DType>(dtype_byte % 7);
    Shape& s = v.shape_;
    s.rank = static_cast<int>(expected.size());
    for (int d = 0; d < s.rank; ++d) s.sizes[d] = expected[static_cast<std::size_t>(d)];
    perturb_shape(in, s);
    lay_out(in, s);
    v.place(in);
    return v;
  }

  Reach reach() const { return extent_.reach; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }

  TensorView view() const {
    return TensorView(data_, dtype_, shape_.sizes.data(), shape_.strides.data(), shape_.rank);
  }

  // Makes the data pointer another view's (that view's memory must outlive this one's use).
  void alias(const FuzzView& other) { data_ = other.data_; }

  // Every element of the buffer, from value(): floats as they are, bools as 0/1 (a bool byte of 2
  // would be invalid memory, not an invalid argument). Integer views, which attention refuses, stay 0.
  template <class Value>
  void fill(Value&& value) {
    if (!buffer_ || !(is_floating(dtype_) || dtype_ == DType::boolean)) return;  // integers stay 0
    const std::size_t elem = dtype_size(dtype_);
    for (std::size_t i = 0; i + elem <= buffer_bytes_; i += elem) {
      std::byte* p = buffer_.get() + i;
      if (dtype_ == DType::boolean) {
        *p = std::byte{static_cast<unsigned char>(value() != 0.0 ? 1 : 0)};
      } else {
        store_from_double(p, dtype_, value());
      }
    }
  }

  // Whether two of the elements the view reaches are one: an output must not be such a view.
  // Exact, for views of up to kMaxCheckedElements elements; larger ones answer false.
  bool writes_an_element_twice() const {
    constexpr std::int64_t kMaxCheckedElements = std::int64_t{1} << 16;
    if (extent_.reach != Reach::small) return false;
    const Shape& s = shape_;
    std::int64_t count = 1;
    for (int d = 0; d < s.rank; ++d) {
      count *= s.sizes[d];  // each size is at least 1 here, and the product stops at the cap
      if (count > kMaxCheckedElements) return false;
    }
    std::vector<std::int64_t> offsets;
    offsets.reserve(static_cast<std::size_t>(count));
    for_each_offset([&](std::int64_t offset) { offsets.push_back(offset); });
    std::sort(offsets.begin(), offsets.end());
    return std::adjacent_find(offsets.begin(), offsets.end()) != offsets.end();
  }

  // Sets buffer element `index` (modulo the buffer's length) of a floating view.
  void poke(std::size_t index, double value) {
    if (!buffer_ || !is_floating(dtype_)) return;
    const std::size_t elem = dtype_size(dtype_);
    store_from_double(buffer_.get() + index % (buffer_bytes_ / elem) * elem, dtype_, value);
  }

  // Whether any element the view reaches is NaN (views backed by a buffer only; an accepted output
  // reaches at most its buffer's elements, so this is cheap).
  bool has_nan() const {
    if (extent_.reach != Reach::small || data_ == nullptr || !is_floating(dtype_)) return false;
    const auto elem = static_cast<std::int64_t>(dtype_size(dtype_));
    const auto* base = static_cast<const std::byte*>(data_);
    bool nan = false;
    for_each_offset([&](std::int64_t offset) { nan = nan || std::isnan(load_as_double(base + offset * elem, dtype_)); });
    return nan;
  }

 private:
  static void perturb_shape(ByteReader& in, Shape& s) {
    const std::uint8_t b = in.byte();
    if (b < 0xE0) return;
    switch (b % 4) {
      case 0:  // one dimension fewer
        if (s.rank > 0) --s.rank;
        break;
      case 1:  // one leading dimension more
        if (s.rank < kMaxViewRank) {
          for (int d = s.rank; d > 0; --d) s.sizes[d] = s.sizes[d - 1];
          s.sizes[0] = 1;
          ++s.rank;
        }
        break;
      case 2:  // one size replaced, often by an absurd one
        if (s.rank > 0) s.sizes[in.byte() % s.rank] = decode_size(in, 24);
        break;
      case 3:  // one size off by one
        if (s.rank > 0) {
          std::int64_t& size = s.sizes[in.byte() % s.rank];
          const bool up = (in.byte() & 1) != 0;
          if (up ? size < kInt64Max : size > kInt64Min) size += up ? 1 : -1;
        }
        break;
    }
  }

  static void lay_out(ByteReader& in, Shape& s) {
    std::array<int, kMaxViewRank> order = {0, 1, 2, 3};
    const std::uint8_t b = in.byte();
    switch (b % 8) {
      case 3: {  // another memory order: a few swaps of adjacent dimensions
        const std::uint8_t swaps = in.byte();
        for (int i = 0; i + 1 < s.rank; ++i) {
          if ((swaps >> i) & 1) std::swap(order[i], order[i + 1]);
        }
        set_strides_in_order(s, order);
        break;
      }
      case 4:  // padded rows and a spaced innermost dimension
        set_strides_in_order(s, order, 1 + in.byte() % 3, in.byte() % 5);
        break;
      case 5: {  // broadcast: zero strides where the mask says
        set_strides_in_order(s, order);
        const std::uint8_t mask = in.byte();
        for (int d = 0; d < s.rank; ++d) {
          if ((mask >> d) & 1) s.strides[d] = 0;
        }
        break;
      }
      case 6: {  // reversed: negative strides where the mask says
        set_strides_in_order(s, order);
        const std::uint8_t mask = in.byte();
        for (int d = 0; d < s.rank; ++d) {
          if ((mask >> d) & 1) s.strides[d] = -s.strides[d];
        }
        break;
      }
      case 7:  // each stride chosen: small signed, or strange
        for (int d = 0; d < s.rank; ++d) {
          const std::uint8_t c = in.byte();
          s.strides[d] = c < 0xC0 ? static_cast<std::int64_t>(c % 17) - 8 : kStrangeStrides[c & 0x0F];
        }
        break;
      default:
        set_strides_in_order(s, order);
        break;
    }
  }

  // Calls visit(offset) with the element offset of every element, in logical order (a small view's).
  template <class Visit>
  void for_each_offset(Visit&& visit) const {
    const Shape& s = shape_;
    std::array<std::int64_t, kMaxViewRank> idx{};
    for (;;) {
      std::int64_t offset = 0;
      for (int d = 0; d < s.rank; ++d) offset += idx[d] * s.strides[d];
      visit(offset);
      int d = s.rank - 1;
      for (; d >= 0; --d) {  // odometer increment, last dimension fastest
        if (++idx[d] < s.sizes[d]) break;
        idx[d] = 0;
      }
      if (d < 0) return;
    }
  }

  // Memory for the view: its exact reach, a token buffer, or (rarely) a null pointer.
  void place(ByteReader& in) {
    extent_ = extent_of(shape_, dtype_);
    if (extent_.reach == Reach::large) {
      // Valid but too big to back: broadcast it instead (every stride 0), which reaches one element.
      shape_.strides.fill(0);
      extent_ = extent_of(shape_, dtype_);
    }
    const bool null_data = in.byte() >= 0xF8;
    const std::int64_t elem = static_cast<std::int64_t>(dtype_size(dtype_));
    const std::int64_t elements = extent_.reach == Reach::small ? extent_.high - extent_.low + 1 : 1;
    buffer_bytes_ = static_cast<std::size_t>(elements * elem);
    buffer_.reset(new std::byte[buffer_bytes_]());
    if (null_data) {
      data_ = nullptr;
      if (extent_.reach == Reach::small) extent_.reach = Reach::must_reject;  // elements and no data
    } else {
      data_ = buffer_.get() - extent_.low * elem;
    }
  }

  DType dtype_ = DType::f32;
  Shape shape_;
  Extent extent_;
  std::unique_ptr<std::byte[]> buffer_;
  std::size_t buffer_bytes_ = 0;
  void* data_ = nullptr;
};

}  // namespace attnkit::fuzz
