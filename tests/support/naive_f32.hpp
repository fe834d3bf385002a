// The naive float32 attention of shared/DESIGN.md's accuracy rule: the formula in plain float
// arithmetic with the n×m scores materialised, every option, the same dropout stream. A fast kernel
// passes when its error against the float64 reference is at most twice this kernel's, plus a floor.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <vector>

#include "attnkit/attnkit.hpp"
#include "core/philox.hpp"

namespace attnkit::testing {

// q, k, v: any floating dtype (read as float); returns out [B, Hq, n, d_v] as float32, computed in float.
inline Tensor naive_f32_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  const auto& qs = q.shape();
  const std::int64_t B = qs[0], H = qs[1], n = qs[2], d = qs[3], Hkv = k.shape()[1], m = k.shape()[2], dv = v.shape()[3];
  const Tensor qf = Tensor::converted(q.view(), DType::f32), kf = Tensor::converted(k.view(), DType::f32),
               vf = Tensor::converted(v.view(), DType::f32);
  const float* Q = qf.data<float>();
  const float* K = kf.data<float>();
  const float* V = vf.data<float>();
  Tensor out(DType::f32, {B, H, n, dv});
  const float scale = static_cast<float>(o.scale ? *o.scale : 1.0 / std::sqrt(static_cast<double>(d)));
  const float inf = std::numeric_limits<float>::infinity();
  const ConstTensorView mask = o.mask ? o.mask->unsqueezed_to(4) : ConstTensorView();
  std::vector<float> z(static_cast<std::size_t>(m));
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t g = h / (H / Hkv);
        const std::int64_t pos = o.causal == Causal::bottom_right ? i + (m - n) : i;
        float zmax = -inf;
        for (std::int64_t j = 0; j < m; ++j) {
          float s = 0;
          for (std::int64_t c = 0; c < d; ++c) s += Q[((b * H + h) * n + i) * d + c] * K[((b * Hkv + g) * m + j) * d + c];
          s *= scale;
          if (o.softcap > 0) s = static_cast<float>(o.softcap) * std::tanh(s / static_cast<float>(o.softcap));
          if (!o.alibi_slopes.empty()) s -= o.alibi_slopes[static_cast<std::size_t>(h)] * static_cast<float>(std::llabs(pos - j));
          bool visible = !(o.causal != Causal::none && j > pos) && !(o.window.left >= 0 && j < pos - o.window.left) &&
                         !(o.window.right >= 0 && j > pos + o.window.right) &&
                         !(!o.key_lengths.empty() && j >= o.key_lengths[static_cast<std::size_t>(b)]);
          if (o.mask) {
            const std::int64_t idx[4] = {mask.size(0) == 1 ? 0 : b, mask.size(1) == 1 ? 0 : h, mask.size(2) == 1 ? 0 : i,
                                         mask.size(3) == 1 ? 0 : j};
            const auto* e = static_cast<const std::byte*>(mask.data()) +
                            (idx[0] * mask.stride(0) + idx[1] * mask.stride(1) + idx[2] * mask.stride(2) +
                             idx[3] * mask.stride(3)) * static_cast<std::int64_t>(dtype_size(mask.dtype()));
            const float value = static_cast<float>(load_as_double(e, mask.dtype()));
            if (mask.dtype() == DType::boolean) {
              visible = visible && value != 0;
            } else if (value == -inf) {
              visible = false;
            } else {
              s += value;
            }
          }
          z[static_cast<std::size_t>(j)] = visible ? s : -inf;
          if (visible) zmax = std::max(zmax, s);
        }
        if (zmax == -inf) continue;  // no visible key: zeros
        float sum = 0;
        for (std::int64_t j = 0; j < m; ++j) sum += std::exp(z[static_cast<std::size_t>(j)] - zmax);
        float* o_row = out.data<float>() + ((b * H + h) * n + i) * dv;
        for (std::int64_t j = 0; j < m; ++j) {
          if (z[static_cast<std::size_t>(j)] == -inf) continue;
          float p = std::exp(z[static_cast<std::size_t>(j)] - zmax) / sum;
          if (o.dropout_p > 0) {
            p = detail::dropout_keeps(o.seed, o.dropout_p, b, h, i, j) ? p / static_cast<float>(1 - o.dropout_p) : 0.0f;
          }
          for (std::int64_t c = 0; c < dv; ++c) o_row[c] += p * V[((b * Hkv + g) * m + j) * dv + c];
        }
      }
  return out;
}

}  // namespace attnkit::testing
