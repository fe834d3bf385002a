// Integer helpers for sizes and block counts.
#pragma once

#include <cstdint>

namespace attnkit::detail {

// ⌈a / b⌉ for a >= 0 and b > 0, without overflow however close a is to INT64_MAX.
constexpr std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return a / b + (a % b != 0); }

// a rounded up to a multiple of b (a >= 0, b > 0).
constexpr std::int64_t round_up(std::int64_t a, std::int64_t b) { return ceil_div(a, b) * b; }

}  // namespace attnkit::detail
