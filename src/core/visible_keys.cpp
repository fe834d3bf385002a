#include "core/visible_keys.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/element_io.hpp"

namespace attnkit::detail {

bool row_has_visible_key(const Problem& p, std::int64_t b, std::int64_t h, std::int64_t i) {
  const Problem::VisibleKeys keys = p.visible_keys(b, i);
  if (keys.first > keys.last) return false;
  if (p.mask_kind == MaskKind::none) return true;
  if (p.mask_kind == MaskKind::additive && p.mask.dtype() == DType::f64) {
    // Read as stored: a float64 entry below float32's range is a finite bias, not a mask.
    const auto* row = static_cast<const std::byte*>(p.mask.data()) +
                      (b * p.mask.stride(0) + h * p.mask.stride(1) + i * p.mask.stride(2)) * std::int64_t{8};
    for (std::int64_t j = keys.first; j <= keys.last; ++j) {
      double bias;
      std::memcpy(&bias, row + j * p.mask.stride(3) * std::int64_t{8}, sizeof bias);
      if (bias != -INFINITY) return true;
    }
    return false;
  }
  // Keep-masks read as 1/0, other additive dtypes convert to float exactly.
  constexpr std::int64_t kChunk = 256;
  float chunk[kChunk];
  for (std::int64_t j0 = keys.first; j0 <= keys.last; j0 += kChunk) {
    const std::int64_t count = std::min(kChunk, keys.last + 1 - j0);
    load_mask_row(p, b, h, i, j0, count, chunk);
    const bool keep = p.mask_kind == MaskKind::keep;
    if (std::any_of(chunk, chunk + count, [&](float x) { return keep ? x != 0 : x != -INFINITY; })) return true;
  }
  return false;
}

}  // namespace attnkit::detail
