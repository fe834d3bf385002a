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

void move_to_stored_output(Tensor& dq64, Tensor& dk64, const Tensor& out, const Tensor& out64, const Tensor& d_out64,
                           const Tensor& probs64, const Tensor& q64, const Tensor& k64, double scale, double softcap) {
  const std::int64_t batch = q64.shape()[0], q_heads = q64.shape()[1], n = q64.shape()[2], d_k = q64.shape()[3];
  const std::int64_t kv_heads = k64.shape()[1], m = k64.shape()[2], d_v = out64.shape()[3];
  double* dq = dq64.data<double>();
  double* dk = dk64.data<double>();
  const double* o64 = out64.data<double>();
  const double* d_out = d_out64.data<double>();
  const double* p = probs64.data<double>();
  const double* q = q64.data<double>();
  const double* k = k64.data<double>();
  const std::int64_t group = kv_heads > 0 ? q_heads / kv_heads : 1;
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t h = 0; h < q_heads; ++h) {
      const std::int64_t g = h / group;
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t row = (b * q_heads + h) * n + i;
        double delta_d = 0.0;  // δD_i = dO_i · (O_i as stored − O_i exact)
        for (std::int64_t c = 0; c < d_v; ++c) delta_d += d_out[row * d_v + c] * (element(out, row * d_v + c) - o64[row * d_v + c]);
        if (delta_d == 0.0 || !std::isfinite(delta_d)) continue;  // a non-finite output fails its own check
        for (std::int64_t j = 0; j < m; ++j) {
          const std::int64_t key = (b * kv_heads + g) * m + j;
          double factor = 1.0;
          if (softcap > 0) {
            double s = 0.0;
            for (std::int64_t c = 0; c < d_k; ++c) s += q[row * d_k + c] * k[key * d_k + c];
            const double t = std::tanh(scale * s / softcap);
            factor = 1.0 - t * t;
          }
          const double shift = -scale * p[row * m + j] * factor * delta_d;  // the change of dS_ij, times scale
          for (std::int64_t c = 0; c < d_k; ++c) {
            dq[row * d_k + c] += shift * k[key * d_k + c];
            dk[key * d_k + c] += shift * q[row * d_k + c];
          }
        }
      }
    }
  }
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
