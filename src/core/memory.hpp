// Sizing and checking large requests before they are allocated (attnkit/memory.hpp says why).
#pragma once

#include <cstdint>
#include <limits>
#include <string>

namespace attnkit::detail {

// A byte count that saturates at UINT64_MAX instead of wrapping: sizes come from the caller, and a
// product past 64 bits must read as "too large", never as a small number. Negative factors count as 0.
class ByteCount {
 public:
  static constexpr std::uint64_t kSaturated = std::numeric_limits<std::uint64_t>::max();

  constexpr ByteCount() = default;
  constexpr ByteCount(std::uint64_t bytes) : bytes_(bytes) {}  // NOLINT(google-explicit-constructor)
  static constexpr ByteCount of(std::int64_t count) { return ByteCount(count > 0 ? static_cast<std::uint64_t>(count) : 0); }

  constexpr std::uint64_t value() const { return bytes_; }
  constexpr bool saturated() const { return bytes_ == kSaturated; }

  friend constexpr ByteCount operator+(ByteCount a, ByteCount b) {
    std::uint64_t sum = 0;
    return __builtin_add_overflow(a.bytes_, b.bytes_, &sum) ? ByteCount(kSaturated) : ByteCount(sum);
  }
  friend constexpr ByteCount operator*(ByteCount a, ByteCount b) {
    std::uint64_t product = 0;
    return __builtin_mul_overflow(a.bytes_, b.bytes_, &product) ? ByteCount(kSaturated) : ByteCount(product);
  }
  ByteCount& operator+=(ByteCount other) { return *this = *this + other; }

 private:
  std::uint64_t bytes_ = 0;
};

// Requests below this are not checked: asking the system costs a few system calls, and a request this
// small that fails is reported by the allocation itself.
inline constexpr std::uint64_t kUncheckedBytes = std::uint64_t{64} << 20;

// Raises Error(out_of_memory), before anything is allocated, when `bytes` exceeds available_memory():
// "<what> needs 1.50 TiB (1649267441664 bytes), but 22.4 GiB are available". `describe` is called
// only then, so building the message costs nothing on the common path.
[[noreturn]] void fail_memory(ByteCount bytes, std::uint64_t available, const std::string& what);
std::uint64_t available_memory_now();

template <class Describe>
void require_memory(ByteCount bytes, Describe&& describe) {
  if (bytes.value() < kUncheckedBytes) return;
  const std::uint64_t available = available_memory_now();
  if (bytes.value() > available) fail_memory(bytes, available, describe());
}

// "1.50 TiB" style, for messages.
std::string human_bytes(std::uint64_t bytes);

}  // namespace attnkit::detail
