#include "core/visible_keys.hpp"

#include <cmath>
#include <cstddef>

namespace attnkit::detail {

bool row_has_visible_key(const Problem& p, std::int64_t b, std::int64_t h, std::int64_t i) {
  const Problem::VisibleKeys keys = p.visible_keys(b, i);
  if (keys.first > keys.last) return false;
  if (p.mask_kind == MaskKind::none) return true;
  // Each entry read as stored (load_as_double is exact for every mask dtype): a float64 bias below
  // float32's range is a finite bias, not a mask, though the fast kernels' float32 copy is −inf.
  const DType dtype = p.mask.dtype();
  const std::int64_t size = static_cast<std::int64_t>(dtype_size(dtype));
  const auto* row = static_cast<const std::byte*>(p.mask.data()) +
                    (b * p.mask.stride(0) + h * p.mask.stride(1) + i * p.mask.stride(2)) * size;
  const bool keep = p.mask_kind == MaskKind::keep;
  for (std::int64_t j = keys.first; j <= keys.last; ++j) {
    const double entry = load_as_double(row + j * p.mask.stride(3) * size, dtype);
    if (keep ? entry != 0 : entry != -INFINITY) return true;
  }
  return false;
}

}  // namespace attnkit::detail
