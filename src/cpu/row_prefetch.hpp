// Requests for rows of K and V ahead of their use: plain C++ (__builtin_prefetch), compiled once for
// the baseline CPU and inlined into every target's kernels, which call it from their key loops.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>

#include "attnkit/quantized.hpp"
#include "attnkit/tensor.hpp"
#include "cpu/visibility.hpp"

// Every function here that issues prefetches is inlined from the start: GCC deletes a call whose
// only effects are prefetches, as if it had none, when it is left to be inlined later
// (tests/cpu/check_row_requests.sh checks that decoding's requests are in the code).
#define ATTNKIT_REQUEST __attribute__((always_inline)) inline

namespace attnkit::cpu {

// Decoding requests key rows 8 ahead: 4, 12, 16, 32 and 64 measured no better on the machines in
// docs/tuning.md, "Requesting rows ahead".
constexpr std::int64_t kPrefetchRows = 8;  // how far ahead of use key rows are requested
constexpr std::int64_t kCacheLine = 64;

// Bytes per element of the dtypes the fast kernels read (inline: decoding asks for every row).
inline std::int64_t element_bytes(DType dtype) {
  if (dtype == DType::f32) return 4;  // (quantized rows: 1, their strides count bytes)
  return dtype == DType::bf16 || dtype == DType::f16 ? 2 : static_cast<std::int64_t>(dtype_size(dtype));
}

// Requests rows of one KV head of K or V ahead of use, with the addressing worked out once per
// block rather than once per row (decoding asks for two rows per key). Rows not of unit stride are
// not requested.
class RowPrefetcher {
 public:
  RowPrefetcher(const ConstTensorView& t, std::int64_t kv_head)
      : RowPrefetcher(t, kv_head, element_bytes(t.dtype())) {}
  ATTNKIT_REQUEST void operator()(const char* row) const { request<3>(row); }
  // The same into the second-level cache only (prefetcht1): for rows read long after the request,
  // which in L1 would only evict lines in use and hold its miss buffers meanwhile.
  ATTNKIT_REQUEST void into_l2(const char* row) const { request<2>(row); }
  // The same for the rows of a quantized dtype: records of any byte length, one after the other in
  // a block. The lines from the first that starts inside the row to the one holding its last byte:
  // a line the row shares with the row before it came with that row's request. (Asked for line by
  // line from the row's start, quantized rows made up to twice as many requests as lines.)
  template <int Locality = 3>
  ATTNKIT_REQUEST void records(const char* row) const {
    const auto begin = reinterpret_cast<std::uintptr_t>(row);
    const std::uintptr_t first = (begin + kCacheLine - 1) / kCacheLine * kCacheLine;
    const std::uintptr_t last = (begin + static_cast<std::uintptr_t>(bytes_) - 1) / kCacheLine * kCacheLine;
    for (std::uintptr_t line = first; bytes_ > 0 && line <= last; line += kCacheLine)
      __builtin_prefetch(reinterpret_cast<const char*>(line), 0, Locality);
  }
  const char* row_begin(StoredRow at) const { return head_ + at.outer * outer_stride_ + at.row * row_stride_; }
  std::int64_t row_bytes() const { return bytes_; }  // 0: rows not requested

 private:
  // Every cache line of the row, with __builtin_prefetch's locality (3: into L1, 2: into L2).
  template <int Locality>
  ATTNKIT_REQUEST void request(const char* begin) const {
    for (std::int64_t offset = 0; offset < bytes_; offset += kCacheLine) __builtin_prefetch(begin + offset, 0, Locality);
  }
  RowPrefetcher(const ConstTensorView& t, std::int64_t kv_head, std::int64_t element)
      : head_(static_cast<const char*>(t.data()) + kv_head * t.stride(1) * element),
        outer_stride_(t.stride(0) * element),
        row_stride_(t.stride(2) * element),
        bytes_(t.stride(3) != 1        ? 0
               : is_quantized(t.dtype()) ? quantized_row_bytes(t.dtype(), t.size(3))  // the codes and their scales
                                         : t.size(3) * element) {}

  const char* head_;
  std::int64_t outer_stride_, row_stride_, bytes_;
};

// Requests one tile's share of the next key block's rows, keys' then values', a few cache lines at a
// time: the tile's micro-kernels call it between their column chunks, and what is left is requested
// when it goes out of scope. Requested all at once, a tile's 176 lines (d = 128, f32) fill the
// core's miss buffers and the prefetch instructions themselves stall (2.5% of the f32 forward's time
// at n = 8192 on an AVX-512 Zen 4), and the packing that follows finds fewer of its rows in cache.
// See docs/tuning.md, "Prefetching the next key block".
class SpreadRowPrefetch {
  static std::int64_t lines_of(std::int64_t bytes) { return (bytes + kCacheLine - 1) / kCacheLine; }

 public:
  // Rows [first, end) of the block starting at key `next`, over `chunks` calls.
  SpreadRowPrefetch(const detail::Problem& p, std::int64_t batch, const RowPrefetcher& keys,
                    const RowPrefetcher& values, std::int64_t next, std::int64_t first, std::int64_t end,
                    std::int64_t chunks)
      : p_(p), batch_(batch), next_(next), row_(first), end_(std::max(first, end)), keys_(keys), values_(values) {
    const std::int64_t lines = (end_ - row_) * (lines_of(keys.row_bytes()) + lines_of(values.row_bytes()));
    per_call_ = std::max<std::int64_t>(1, (lines + chunks - 1) / std::max<std::int64_t>(1, chunks));
  }
  SpreadRowPrefetch(const SpreadRowPrefetch&) = delete;
  SpreadRowPrefetch& operator=(const SpreadRowPrefetch&) = delete;
  // Whatever way the tile ends (a skipped or seen-only tile calls no micro-kernel), its share is requested.
  ATTNKIT_REQUEST ~SpreadRowPrefetch() { request(std::numeric_limits<std::int64_t>::max()); }
  ATTNKIT_REQUEST void operator()() { request(per_call_); }

 private:
  ATTNKIT_REQUEST void request(std::int64_t lines) {
    while (lines > 0 && row_ < end_) {
      const RowPrefetcher& rows = on_values_ ? values_ : keys_;
      const char* begin = rows.row_begin(stored_row(p_, batch_, next_ + row_));
      for (; offset_ < rows.row_bytes() && lines > 0; offset_ += kCacheLine, --lines)
        __builtin_prefetch(begin + offset_);
      if (offset_ < rows.row_bytes()) return;
      offset_ = 0;
      if (on_values_) ++row_;
      on_values_ = !on_values_;
    }
  }

  const detail::Problem& p_;
  std::int64_t batch_, next_, row_, end_, per_call_ = 1, offset_ = 0;
  bool on_values_ = false;
  const RowPrefetcher &keys_, &values_;
};

}  // namespace attnkit::cpu
