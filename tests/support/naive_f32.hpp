// The naive float32 attention of docs/semantics.md's accuracy rule, forward and backward: the formula
// in plain float arithmetic with each row's m scores materialised, every option, the same dropout
// stream. A fast kernel passes when its error against the float64 reference is at most twice this
// kernel's, plus a floor.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <vector>

#include "attnkit/attnkit.hpp"
#include "core/philox.hpp"

namespace attnkit::testing {

// The logits of one query row in float, in docs/semantics.md's order (scale, softcap, ALiBi, additive mask,
// −inf where not visible). Shared by the naive forward and backward so both read the same formula.
class NaiveLogits {
 public:
  NaiveLogits(const Tensor& q, const Tensor& k, const AttentionOptions& o)
      : o_(o), qf_(Tensor::converted(q.view(), DType::f32)), kf_(Tensor::converted(k.view(), DType::f32)),
        H_(q.shape()[1]), Hkv_(k.shape()[1]), n_(q.shape()[2]), m_(k.shape()[2]), d_(q.shape()[3]),
        scale_(static_cast<float>(o.scale ? *o.scale : d_ > 0 ? 1.0 / std::sqrt(static_cast<double>(d_)) : 1.0)),
        mask_(o.mask ? o.mask->unsqueezed_to(4) : ConstTensorView()) {}

  float scale() const { return scale_; }
  std::int64_t kv_head(std::int64_t h) const { return h / (H_ / Hkv_); }

  // z[j]: the final logit of query i against key j, −inf where masked; capped_tanh[j] = tanh(s/c)
  // when softcap is on (its derivative is 1 − tanh²). Returns the row maximum, −inf if none visible.
  float row(std::int64_t b, std::int64_t h, std::int64_t i, std::vector<float>& z, std::vector<float>& capped_tanh) const {
    const float inf = std::numeric_limits<float>::infinity();
    const float* Q = qf_.data<float>();
    const float* K = kf_.data<float>();
    const std::int64_t g = kv_head(h);
    const std::int64_t pos = o_.causal == Causal::bottom_right ? i + (m_ - n_) : i;
    z.assign(static_cast<std::size_t>(m_), -inf);
    capped_tanh.assign(static_cast<std::size_t>(m_), 0.0f);
    float zmax = -inf;
    for (std::int64_t j = 0; j < m_; ++j) {
      float s = 0;
      for (std::int64_t c = 0; c < d_; ++c) s += Q[((b * H_ + h) * n_ + i) * d_ + c] * K[((b * Hkv_ + g) * m_ + j) * d_ + c];
      s *= scale_;
      if (o_.softcap > 0) {
        const float t = std::tanh(s / static_cast<float>(o_.softcap));
        capped_tanh[static_cast<std::size_t>(j)] = t;
        s = static_cast<float>(o_.softcap) * t;
      }
      if (!o_.alibi_slopes.empty()) {
        s -= o_.alibi_slopes[static_cast<std::size_t>(h)] * static_cast<float>(std::llabs(pos - j));
      }
      bool visible = !(o_.causal != Causal::none && j > pos) && !(o_.window.left >= 0 && j < pos - o_.window.left) &&
                     !(o_.window.right >= 0 && j > pos + o_.window.right) &&
                     !(!o_.key_lengths.empty() && j >= o_.key_lengths[static_cast<std::size_t>(b)]);
      if (o_.mask) {
        const float value = mask_value(b, h, i, j);
        if (mask_.dtype() == DType::boolean) {
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
    return zmax;
  }

 private:
  float mask_value(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
    const std::int64_t idx[4] = {mask_.size(0) == 1 ? 0 : b, mask_.size(1) == 1 ? 0 : h, mask_.size(2) == 1 ? 0 : i,
                                 mask_.size(3) == 1 ? 0 : j};
    const auto* e = static_cast<const std::byte*>(mask_.data()) +
                    (idx[0] * mask_.stride(0) + idx[1] * mask_.stride(1) + idx[2] * mask_.stride(2) +
                     idx[3] * mask_.stride(3)) * static_cast<std::int64_t>(dtype_size(mask_.dtype()));
    return static_cast<float>(load_as_double(e, mask_.dtype()));
  }

  const AttentionOptions& o_;
  Tensor qf_, kf_;
  std::int64_t H_, Hkv_, n_, m_, d_;
  float scale_;
  ConstTensorView mask_;
};

// o.dropout_p ← a dropout probability just above one of batch entry 0's uniforms over h < heads,
// i < n, j < m for o.seed (multiples of 2^-24): p = u + 2^-27 for the first u in [0.25, 0.5), where
// floats are 2^-25 apart, so that p rounded to a float is u while the key of u is dropped (u < p).
// A fatal failure if there is no such u (call through ASSERT_NO_FATAL_FAILURE).
inline void set_dropout_just_above_a_uniform(AttentionOptions& o, std::int64_t heads, std::int64_t n, std::int64_t m) {
  o.dropout_p = -1;
  for (std::int64_t h = 0; h < heads && o.dropout_p < 0; ++h)
    for (std::int64_t i = 0; i < n && o.dropout_p < 0; ++i)
      for (std::int64_t j = 0; j < m && o.dropout_p < 0; ++j) {
        const double u = detail::dropout_uniform(o.seed, 0, h, i, j);
        if (u >= 0.25 && u < 0.5) o.dropout_p = u + 0x1p-27;
      }
  ASSERT_GT(o.dropout_p, 0.25) << "no uniform in [0.25, 0.5) among " << heads * n * m;
  ASSERT_LT(static_cast<float>(o.dropout_p), o.dropout_p) << "p must round down to its uniform";
}

// The dropout multiplier of (b, h, i, j) in float: 1/(1 − p) if kept, 0 if dropped, 1 without dropout.
inline float naive_dropout_multiplier(const AttentionOptions& o, std::int64_t b, std::int64_t h, std::int64_t i,
                                      std::int64_t j) {
  if (o.dropout_p == 0) return 1.0f;
  return detail::dropout_keeps(o.seed, o.dropout_p, b, h, i, j) ? 1.0f / static_cast<float>(1 - o.dropout_p) : 0.0f;
}

// x rounded to the nearest bf16 value (ties to even), as a float.
inline float round_to_bf16(float x) { return to_float(to_bfloat16(x)); }

// x rounded to the nearest value of `format` (bf16 or f16, ties to even), as a float; x itself for f32.
inline float round_to(DType format, float x) {
  if (format == DType::bf16) return round_to_bf16(x);
  if (format == DType::f16) return to_float(to_float16(x));
  return x;
}

// The format a target rounds P to before P·V in a forward of q, k and v of these dtypes
// (include/attnkit/targets.hpp): bf16 where it takes bf16 dot products of bf16 inputs, f16 where it
// runs f16 inputs on f16 tiles, else f32 (no rounding).
inline DType forward_p_rounding(Target target, DType q, DType k, DType v) {
  if (target_uses_bf16_dot(target) && q == DType::bf16 && k == DType::bf16 && v == DType::bf16) return DType::bf16;
  if (target_uses_f16_tiles(target) && q == DType::f16 && k == DType::f16 && v == DType::f16) return DType::f16;
  return DType::f32;
}

// q, k, v: any floating dtype (read as float); returns out [B, Hq, n, d_v] as float32, computed in float.
// With round_p bf16 or f16, the comparison kernel of the targets that round P (forward_p_rounding):
// each unnormalised weight e^(z − max), after dropout, is rounded to that format before it multiplies
// V, and the row is divided by the float sum of the unrounded weights at the end, as FlashAttention
// and torch do.
inline Tensor naive_f32_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o,
                                DType round_p = DType::f32) {
  const auto& qs = q.shape();
  const std::int64_t B = qs[0], H = qs[1], n = qs[2], Hkv = k.shape()[1], m = k.shape()[2], dv = v.shape()[3];
  const NaiveLogits logits(q, k, o);
  const Tensor vf = Tensor::converted(v.view(), DType::f32);
  const float* V = vf.data<float>();
  Tensor out(DType::f32, {B, H, n, dv});
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> z, capped_tanh;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t g = logits.kv_head(h);
        const float zmax = logits.row(b, h, i, z, capped_tanh);
        if (zmax == -inf) continue;  // no visible key: zeros (with or without a sink)
        // An attention sink's logit joins the sum (relative to the keys' max, as the kernels fold it
        // in after the keys) and weights no value.
        float sum = o.sinks.empty() ? 0.0f : std::exp(o.sinks[static_cast<std::size_t>(h)] - zmax);
        for (std::int64_t j = 0; j < m; ++j) sum += std::exp(z[static_cast<std::size_t>(j)] - zmax);
        float* o_row = out.data<float>() + ((b * H + h) * n + i) * dv;
        if (round_p != DType::f32) {
          for (std::int64_t j = 0; j < m; ++j) {
            if (z[static_cast<std::size_t>(j)] == -inf) continue;
            const float p = round_to(round_p, std::exp(z[static_cast<std::size_t>(j)] - zmax) *
                                                  naive_dropout_multiplier(o, b, h, i, j));
            for (std::int64_t c = 0; c < dv; ++c) o_row[c] += p * V[((b * Hkv + g) * m + j) * dv + c];
          }
          for (std::int64_t c = 0; c < dv; ++c) o_row[c] /= sum;
          continue;
        }
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

struct NaiveGradients {
  Tensor dq, dk, dv;  // float32, the shapes of q, k and v
};

// The backward in float, on the same inputs a fast backward gets: P = exp(z − lse) from the `lse`
// passed in and D_i = Σ_c dO[i, c] · out[i, c] from the `out` passed in (with bf16/f16 storage, the
// same rounded out). Masked keys are skipped; a row with no visible key gives zero gradients; dk and
// dv of a KV head sum over its query heads.
// Why the given lse rather than the row's own max and sum: lse is float32, and at |lse| ~ 1e2..1e3 its
// rounding (and that of the forward's logits in it) puts a relative error of 1e-6..1e-4 on every P,
// which a renormalising naive kernel does not have. That error comes with the inputs: even exact
// arithmetic from this lse misses the float64 reference's dv by one to four orders of magnitude more
// than a renormalising float kernel does, on outlier or large logits, so such a naive kernel would
// set a bar that no kernel consuming lse can meet.
// With round_bf16, the comparison kernel of the bf16-dot targets: dropout(P) is rounded to bf16
// before it multiplies dO, and dS · scale before it multiplies K and Q, as FlashAttention does.
inline NaiveGradients naive_f32_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                         const Tensor& d_out, const Tensor& lse, const AttentionOptions& o,
                                         bool round_bf16 = false) {
  const auto& qs = q.shape();
  const std::int64_t B = qs[0], H = qs[1], n = qs[2], d = qs[3], Hkv = k.shape()[1], m = k.shape()[2], dv = v.shape()[3];
  const NaiveLogits logits(q, k, o);
  const Tensor qf = Tensor::converted(q.view(), DType::f32), kf = Tensor::converted(k.view(), DType::f32),
               vf = Tensor::converted(v.view(), DType::f32), of = Tensor::converted(out.view(), DType::f32),
               gf = Tensor::converted(d_out.view(), DType::f32);
  const float* Q = qf.data<float>();
  const float* K = kf.data<float>();
  const float* V = vf.data<float>();
  NaiveGradients grads{Tensor(DType::f32, q.shape()), Tensor(DType::f32, k.shape()), Tensor(DType::f32, v.shape())};
  const float scale = logits.scale();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> z, capped_tanh;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t g = logits.kv_head(h);
        const float row_lse = lse.data<float>()[(b * H + h) * n + i];
        if (logits.row(b, h, i, z, capped_tanh) == -inf) continue;  // no visible key: zero gradients
        const float* dO = gf.data<float>() + ((b * H + h) * n + i) * dv;
        const float* O = of.data<float>() + ((b * H + h) * n + i) * dv;
        // D_i = Σ_c dO[i, c] · O[i, c] = Σ_j P[i, j] · dP[i, j]
        float D = 0;
        for (std::int64_t c = 0; c < dv; ++c) D += dO[c] * O[c];
        float* dq_row = grads.dq.data<float>() + ((b * H + h) * n + i) * d;
        for (std::int64_t j = 0; j < m; ++j) {
          if (z[static_cast<std::size_t>(j)] == -inf) continue;  // masked: contributes nothing
          const float p = std::exp(z[static_cast<std::size_t>(j)] - row_lse);  // P[i, j], the forward's weight
          const float multiplier = naive_dropout_multiplier(o, b, h, i, j);
          const float* v_row = V + ((b * Hkv + g) * m + j) * dv;
          float* dv_row = grads.dv.data<float>() + ((b * Hkv + g) * m + j) * dv;
          // dP[i, j] = (dO_i · V_j) · dropout      from O_i = Σ_j P[i, j] · dropout · V_j
          // dV_j    += P[i, j] · dropout · dO_i   from the same line
          const float weight = round_bf16 ? round_to_bf16(p * multiplier) : p * multiplier;
          float dp = 0;
          for (std::int64_t c = 0; c < dv; ++c) {
            dp += dO[c] * v_row[c];
            dv_row[c] += weight * dO[c];
          }
          dp *= multiplier;
          // ds = P ∘ (dP − D)                       from P = softmax(z)
          float ds = p * (dp - D);
          // ALiBi and the additive mask are constants; capped = c · tanh(s / c) has derivative 1 − tanh²
          if (o.softcap > 0) {
            const float t = capped_tanh[static_cast<std::size_t>(j)];
            ds *= 1.0f - t * t;
          }
          // dq_i += ds · scale · k_j ;  dk_j += ds · scale · q_i     from s = (q_i · k_j) · scale
          const float* k_row = K + ((b * Hkv + g) * m + j) * d;
          const float* q_row = Q + ((b * H + h) * n + i) * d;
          float* dk_row = grads.dk.data<float>() + ((b * Hkv + g) * m + j) * d;
          const float ds_scaled = round_bf16 ? round_to_bf16(ds * scale) : ds * scale;
          for (std::int64_t c = 0; c < d; ++c) {
            dq_row[c] += ds_scaled * k_row[c];
            dk_row[c] += ds_scaled * q_row[c];
          }
        }
      }
  return grads;
}

}  // namespace attnkit::testing
