#include "soak/compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

namespace attnkit::cli::soak {

void poison(Tensor& t) {
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    store_from_double(static_cast<std::byte*>(t.raw()) + i * static_cast<std::int64_t>(dtype_size(t.dtype())), t.dtype(),
                      std::numeric_limits<double>::quiet_NaN());
  }
}

Tensor poisoned(DType dtype, std::vector<std::int64_t> shape) {
  Tensor t(dtype, std::move(shape));
  poison(t);
  return t;
}

namespace {

double element(const Tensor& t, std::int64_t i) {
  return load_as_double(static_cast<const std::byte*>(t.raw()) + i * static_cast<std::int64_t>(dtype_size(t.dtype())), t.dtype());
}

}  // namespace

double max_abs(const Tensor& t) {
  double m = 0.0;
  for (std::int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::abs(element(t, i)));
  return m;
}

bool all_nan(const Tensor& t) {
  for (std::int64_t i = 0; i < t.numel(); ++i)
    if (!std::isnan(element(t, i))) return false;
  return true;
}

double normalised_error(const Tensor& a, const Tensor& b, double scale) {
  double worst = 0.0;
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    const double x = element(a, i), y = element(b, i);
    if (!std::isfinite(x) && std::isfinite(y)) return std::numeric_limits<double>::infinity();
    if (std::isfinite(y)) worst = std::max(worst, std::abs(x - y) / scale);
  }
  return worst;
}

double gradient_error(const Tensor& got, const Tensor& reference) {
  return normalised_error(got, reference, std::max(1.0, max_abs(reference)));
}

double lse_error(const Tensor& a, const Tensor& b) {
  double worst = 0.0;
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    const double x = element(a, i), y = element(b, i);
    if (std::isinf(y) || std::isinf(x) || std::isnan(x)) {
      if (x != y) return std::numeric_limits<double>::infinity();
      continue;
    }
    worst = std::max(worst, std::abs(x - y) / std::max(1.0, std::abs(y)));
  }
  return worst;
}

}  // namespace attnkit::cli::soak
