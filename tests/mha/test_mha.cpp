// The multi-head attention module (attnkit::MultiHeadAttention) against a float64 composition written
// here, independently, in plain loops:
//
//   1. projections   Q = X_q·W_qᵀ + b_q,  K = X_k·W_kᵀ + b_k,  V = X_v·W_vᵀ + b_v         in double
//   2. RoPE          pair c of each head, (c, c + d/2) or (2c, 2c + 1), rotated by
//                    (first_position + s) · base^(−2c/d)
//   3. attention     attnkit::forward with Kernel::reference on f64 heads; torch's two masks turned
//                    into one attnkit mask by this file
//   4. output        Y = concat(heads)·W_oᵀ + b_o
//
// Its gradients are written by hand, walking the passes in reverse (the attention through
// attnkit::backward with Kernel::reference), and checked against central finite differences of the
// composition's forward, so the oracle is itself verified. The float32 module must then match it for
// the output, the attention weights and every gradient, over every option. Then: torch-layout state
// dicts and files, bad input, empty sizes, and thread-count determinism.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "support/quantisation.hpp"
#include "support/scratch_dir.hpp"
#include "support/testing.hpp"

namespace attnkit {
namespace {

namespace fs = std::filesystem;
using std::int64_t;
using testing::Rng;
using testing::ScratchDir;
using Vec = std::vector<double>;

constexpr double kInf = std::numeric_limits<double>::infinity();

std::size_t at(int64_t i) { return static_cast<std::size_t>(i); }

// ---- the configuration, as this file reads it ----

// torch's defaults applied by the test itself: num_kv_heads 0 → num_heads, head_dim 0 →
// embed_dim / num_heads, kdim and vdim 0 → embed_dim.
struct Dims {
  int64_t E = 0, H = 0, Hkv = 0, d = 0, kdim = 0, vdim = 0;
  bool bias = true;
  std::optional<RopeConfig> rope;
  int64_t q_width() const { return H * d; }
  int64_t kv_width() const { return Hkv * d; }
  // torch.nn.MultiheadAttention holds in_proj_weight [3E, E] exactly when q, k and v share one width.
  bool packed() const { return kdim == E && vdim == E && Hkv == H && q_width() == E; }
};

Dims dims_of(const MultiHeadAttentionConfig& c) {
  Dims dm;
  dm.E = c.embed_dim;
  dm.H = c.num_heads;
  dm.Hkv = c.num_kv_heads == 0 ? c.num_heads : c.num_kv_heads;
  dm.d = c.head_dim == 0 ? c.embed_dim / c.num_heads : c.head_dim;
  dm.kdim = c.kdim == 0 ? c.embed_dim : c.kdim;
  dm.vdim = c.vdim == 0 ? c.embed_dim : c.vdim;
  dm.bias = c.bias;
  dm.rope = c.rope;
  return dm;
}

using Shapes = std::vector<std::pair<std::string, std::vector<int64_t>>>;

// torch's parameter names and shapes, in the order of torch's state dict.
Shapes torch_parameters(const Dims& dm) {
  Shapes p;
  if (dm.packed()) {
    p.push_back({"in_proj_weight", {3 * dm.E, dm.E}});
  } else {
    p.push_back({"q_proj_weight", {dm.q_width(), dm.E}});
    p.push_back({"k_proj_weight", {dm.kv_width(), dm.kdim}});
    p.push_back({"v_proj_weight", {dm.kv_width(), dm.vdim}});
  }
  if (dm.bias) p.push_back({"in_proj_bias", {dm.q_width() + 2 * dm.kv_width()}});
  p.push_back({"out_proj.weight", {dm.E, dm.q_width()}});
  if (dm.bias) p.push_back({"out_proj.bias", {dm.E}});
  return p;
}

// ---- values ----

// x rounded to the nearest value of `dtype` (exact for f64).
double round_to(DType dtype, double x) {
  alignas(8) std::byte buffer[8];
  store_from_double(buffer, dtype, x);
  return load_as_double(buffer, dtype);
}

Vec random_values(Rng& rng, int64_t count, double scale, DType exact_in = DType::f64) {
  Vec v(at(count));
  for (double& x : v) x = round_to(exact_in, scale * rng.normal());
  return v;
}

Vec slice(const Vec& v, int64_t begin, int64_t count) {
  return Vec(v.begin() + static_cast<std::ptrdiff_t>(begin), v.begin() + static_cast<std::ptrdiff_t>(begin + count));
}

Vec concat(std::initializer_list<const Vec*> parts) {
  Vec all;
  for (const Vec* p : parts) all.insert(all.end(), p->begin(), p->end());
  return all;
}

double dot(const Vec& a, const Vec& b) {
  double sum = 0;
  for (std::size_t i = 0; i < a.size(); ++i) sum += a[i] * b[i];
  return sum;
}

Tensor tensor_of(const Vec& v, std::vector<int64_t> shape, DType dtype = DType::f32) {
  Tensor t(DType::f64, std::move(shape));
  std::copy(v.begin(), v.end(), t.data<double>());
  return dtype == DType::f64 ? t : Tensor::converted(t.view(), dtype);
}

// ---- the composition's parameters, one matrix per projection ----

struct Params {
  Vec wq, wk, wv, wo;  // [H·d, E], [Hkv·d, kdim], [Hkv·d, vdim], [E, H·d]   (torch's [out, in], row-major)
  Vec bq, bk, bv, bo;  // [H·d], [Hkv·d], [Hkv·d], [E]; empty without bias
};

Params random_params(Rng& rng, const Dims& dm) {
  Params p;
  p.wq = random_values(rng, dm.q_width() * dm.E, 1.5 / std::sqrt(static_cast<double>(dm.E)));
  p.wk = random_values(rng, dm.kv_width() * dm.kdim, 1.5 / std::sqrt(static_cast<double>(dm.kdim)));
  p.wv = random_values(rng, dm.kv_width() * dm.vdim, 1.5 / std::sqrt(static_cast<double>(dm.vdim)));
  p.wo = random_values(rng, dm.E * dm.q_width(), 1.5 / std::sqrt(static_cast<double>(dm.q_width())));
  if (dm.bias) {
    p.bq = random_values(rng, dm.q_width(), 0.5);
    p.bk = random_values(rng, dm.kv_width(), 0.5);
    p.bv = random_values(rng, dm.kv_width(), 0.5);
    p.bo = random_values(rng, dm.E, 0.5);
  }
  return p;
}

// Reads a state dict in torch's layout: rows [0, E), [E, 2E) and [2E, 3E) of in_proj_weight are W_q,
// W_k and W_v; in_proj_bias is b_q, b_k, b_v one after the other.
Params params_from_state(const std::map<std::string, Tensor>& state, const Dims& dm) {
  Params p;
  if (dm.packed()) {
    const Vec w = testing::values(state.at("in_proj_weight"));
    const int64_t block = dm.E * dm.E;
    p.wq = slice(w, 0, block);
    p.wk = slice(w, block, block);
    p.wv = slice(w, 2 * block, block);
  } else {
    p.wq = testing::values(state.at("q_proj_weight"));
    p.wk = testing::values(state.at("k_proj_weight"));
    p.wv = testing::values(state.at("v_proj_weight"));
  }
  p.wo = testing::values(state.at("out_proj.weight"));
  if (dm.bias) {
    const Vec b = testing::values(state.at("in_proj_bias"));
    p.bq = slice(b, 0, dm.q_width());
    p.bk = slice(b, dm.q_width(), dm.kv_width());
    p.bv = slice(b, dm.q_width() + dm.kv_width(), dm.kv_width());
    p.bo = testing::values(state.at("out_proj.bias"));
  }
  return p;
}

// The same parameters (or their gradients) under torch's names and in torch's layout.
std::map<std::string, Vec> state_of(const Params& p, const Dims& dm) {
  std::map<std::string, Vec> s;
  if (dm.packed()) {
    s["in_proj_weight"] = concat({&p.wq, &p.wk, &p.wv});
  } else {
    s["q_proj_weight"] = p.wq;
    s["k_proj_weight"] = p.wk;
    s["v_proj_weight"] = p.wv;
  }
  s["out_proj.weight"] = p.wo;
  if (dm.bias) {
    s["in_proj_bias"] = concat({&p.bq, &p.bk, &p.bv});
    s["out_proj.bias"] = p.bo;
  }
  return s;
}

std::map<std::string, Tensor> state_tensors(const Params& p, const Dims& dm, DType dtype = DType::f32) {
  const std::map<std::string, Vec> s = state_of(p, dm);
  std::map<std::string, Tensor> t;
  for (const auto& [name, shape] : torch_parameters(dm)) t.emplace(name, tensor_of(s.at(name), shape, dtype));
  return t;
}

// ---- inputs in the composition's layout ----

struct Sequences {
  int64_t B = 0, n = 0, m = 0;
  Vec xq, xk, xv;  // [B, n, E], [B, m, kdim], [B, m, vdim], row-major
};

// ---- the composition: 1. projections ----

// y[r, o] = Σ_i x[r, i] · w[o, i] + b[o]        x [rows, in], w [out, in], y [rows, out]
Vec linear(const Vec& x, int64_t rows, int64_t in, const Vec& w, int64_t out, const Vec& b) {
  Vec y(at(rows * out));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double sum = b.empty() ? 0.0 : b[at(o)];
      for (int64_t i = 0; i < in; ++i) sum += x[at(r * in + i)] * w[at(o * in + i)];
      y[at(r * out + o)] = sum;
    }
  return y;
}

// The gradients of y = x·wᵀ + b:  dx = dy·w,  dw = dyᵀ·x,  db = Σ_r dy[r, :].
void linear_backward(const Vec& dy, const Vec& x, int64_t rows, int64_t in, const Vec& w, int64_t out, bool bias,
                     Vec& dx, Vec& dw, Vec& db) {
  dx.assign(at(rows * in), 0.0);
  dw.assign(at(out * in), 0.0);
  db.assign(bias ? at(out) : 0, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      const double g = dy[at(r * out + o)];
      if (bias) db[at(o)] += g;
      for (int64_t i = 0; i < in; ++i) {
        dx[at(r * in + i)] += g * w[at(o * in + i)];
        dw[at(o * in + i)] += g * x[at(r * in + i)];
      }
    }
}

// ---- 2. RoPE ----

// x [B, S, heads·d]: token s sits at position first + s; pair c of every head is rotated by the angle
// position · base^(−2c/d). `inverse` rotates by the opposite angle: the rotation's transpose, which
// is its gradient.
void rotate(Vec& x, int64_t B, int64_t S, int64_t heads, int64_t d, int64_t first, const RopeConfig& rope,
            bool inverse) {
  const int64_t half = d / 2;
  const bool half_split = rope.layout == RopeLayout::half_split;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t c = 0; c < half; ++c) {
          const double frequency = std::pow(rope.base, -2.0 * static_cast<double>(c) / static_cast<double>(d));
          const double angle = static_cast<double>(first + s) * frequency;
          const double cs = std::cos(angle), sn = inverse ? -std::sin(angle) : std::sin(angle);
          const int64_t head = ((b * S + s) * heads + h) * d;
          const std::size_t i0 = at(head + (half_split ? c : 2 * c)),
                            i1 = at(head + (half_split ? c + half : 2 * c + 1));
          const double a = x[i0], o = x[i1];
          x[i0] = a * cs - o * sn;
          x[i1] = a * sn + o * cs;
        }
}

// ---- 3. attention ----

// [B, S, heads·d] → f64 [B, heads, S, d], and back.
Tensor split_heads(const Vec& x, int64_t B, int64_t S, int64_t heads, int64_t d) {
  Tensor t(DType::f64, {B, heads, S, d});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t s = 0; s < S; ++s)
        for (int64_t c = 0; c < d; ++c) testing::at4(t, b, h, s, c) = x[at(((b * S + s) * heads + h) * d + c)];
  return t;
}

Vec merge_heads(const Tensor& t) {
  const int64_t B = t.shape()[0], heads = t.shape()[1], S = t.shape()[2], d = t.shape()[3];
  Vec x(at(t.numel()));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t s = 0; s < S; ++s)
        for (int64_t c = 0; c < d; ++c) x[at(((b * S + s) * heads + h) * d + c)] = testing::at4(t, b, h, s, c);
  return x;
}

// One element of a mask view of any rank and dtype, as a number (bool: 1 or 0).
double element(ConstTensorView t, std::initializer_list<int64_t> idx) {
  int64_t offset = 0;
  int dim = 0;
  for (int64_t i : idx) offset += i * t.stride(dim++);
  const auto* p = static_cast<const std::byte*>(t.data()) + offset * static_cast<int64_t>(dtype_size(t.dtype()));
  if (t.dtype() == DType::boolean) return *reinterpret_cast<const bool*>(p) ? 1.0 : 0.0;
  return load_as_double(p, t.dtype());
}

// torch's key_padding_mask [B, m] ([m] unbatched) and attn_mask [n, m] or [B·H, n, m] (bool true =
// masked out; floating = added to the logits) as one attnkit mask [B, H, n, m]: a bool keep-mask
// (keep = masked by neither) when both are bool, else an additive f64 mask, −inf where a bool masks.
std::optional<Tensor> attnkit_mask(const MultiHeadAttentionOptions& o, int64_t B, int64_t H, int64_t n, int64_t m,
                                   bool unbatched) {
  if (!o.key_padding_mask && !o.attn_mask) return std::nullopt;
  const bool all_bool = (!o.key_padding_mask || o.key_padding_mask->dtype() == DType::boolean) &&
                        (!o.attn_mask || o.attn_mask->dtype() == DType::boolean);
  Tensor mask(all_bool ? DType::boolean : DType::f64, {B, H, n, m});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < m; ++j) {
          bool masked = false;
          double bias = 0;
          const auto add = [&](ConstTensorView t, double value) {
            if (t.dtype() == DType::boolean) {
              masked = masked || value != 0;
            } else {
              bias += value;
            }
          };
          if (o.key_padding_mask) {
            const ConstTensorView p = *o.key_padding_mask;
            add(p, unbatched ? element(p, {j}) : element(p, {b, j}));
          }
          if (o.attn_mask) {
            const ConstTensorView a = *o.attn_mask;
            add(a, a.rank() == 2 ? element(a, {i, j}) : element(a, {b * H + h, i, j}));
          }
          const int64_t flat = ((b * H + h) * n + i) * m + j;
          if (all_bool) {
            mask.data<bool>()[flat] = !masked;
          } else {
            mask.data<double>()[flat] = masked ? -kInf : bias;
          }
        }
  return mask;
}

// ---- the composition's forward ----

struct CompositionForward {
  Tensor q, k, v;    // rotated heads, f64 [B, H, n, d], [B, Hkv, m, d], [B, Hkv, m, d]
  Tensor attention;  // f64 [B, H, n, d]
  Tensor lse;        // f32 [B, H, n]
  Tensor probs;      // f64 [B, H, n, m], before dropout
  std::optional<Tensor> mask;
  AttentionOptions options;  // its mask views `mask`
  Vec concatenated;          // [B, n, H·d]
  Vec y;                     // [B, n, E]
};

CompositionForward composition_forward(const Dims& dm, const Params& p, const Sequences& x,
                                       const MultiHeadAttentionOptions& o, bool unbatched) {
  CompositionForward f;
  const int64_t B = x.B, n = x.n, m = x.m, d = dm.d;
  // 1. Q = X_q·W_qᵀ + b_q  [B, n, H·d];  K, V likewise  [B, m, Hkv·d]
  Vec q = linear(x.xq, B * n, dm.E, p.wq, dm.q_width(), p.bq);
  Vec k = linear(x.xk, B * m, dm.kdim, p.wk, dm.kv_width(), p.bk);
  const Vec v = linear(x.xv, B * m, dm.vdim, p.wv, dm.kv_width(), p.bv);
  // 2. Q, K ← RoPE(Q), RoPE(K)
  if (dm.rope) {
    rotate(q, B, n, dm.H, d, o.query_position, *dm.rope, false);
    rotate(k, B, m, dm.Hkv, d, o.key_position, *dm.rope, false);
  }
  // 3. A = attention(Q, K, V) per head, by the float64 reference
  f.q = split_heads(q, B, n, dm.H, d);
  f.k = split_heads(k, B, m, dm.Hkv, d);
  f.v = split_heads(v, B, m, dm.Hkv, d);
  f.attention = testing::poisoned(DType::f64, {B, dm.H, n, d});
  f.lse = testing::poisoned(DType::f32, {B, dm.H, n});
  f.probs = testing::poisoned(DType::f64, {B, dm.H, n, m});
  f.mask = attnkit_mask(o, B, dm.H, n, m, unbatched);
  f.options.causal = o.causal;
  f.options.window = o.window;
  f.options.dropout_p = o.dropout_p;
  f.options.seed = o.seed;
  f.options.kernel = Kernel::reference;
  if (f.mask) f.options.mask = f.mask->view();
  forward(f.q.view(), f.k.view(), f.v.view(), f.attention.view(), f.options,
          ForwardExtras{f.lse.view(), f.probs.view()});
  // 4. Y = concat(A)·W_oᵀ + b_o  [B, n, E]
  f.concatenated = merge_heads(f.attention);
  f.y = linear(f.concatenated, B * n, dm.q_width(), p.wo, dm.E, p.bo);
  return f;
}

// ---- the composition's backward: the passes in reverse ----

struct CompositionGradients {
  Vec dxq, dxk, dxv;  // like Sequences
  Params dw;          // like Params
};

CompositionGradients composition_backward(const Dims& dm, const Params& p, const Sequences& x,
                                          const MultiHeadAttentionOptions& o, const CompositionForward& f,
                                          const Vec& dy) {
  CompositionGradients g;
  const int64_t B = x.B, n = x.n, m = x.m, d = dm.d;
  // 4. Y = concat(A)·W_oᵀ + b_o
  Vec d_concatenated;
  linear_backward(dy, f.concatenated, B * n, dm.q_width(), p.wo, dm.E, dm.bias, d_concatenated, g.dw.wo, g.dw.bo);
  // 3. A = attention(Q, K, V), by the float64 reference
  const Tensor d_attention = split_heads(d_concatenated, B, n, dm.H, d);
  Tensor dq = testing::poisoned(DType::f64, f.q.shape());
  Tensor dk = testing::poisoned(DType::f64, f.k.shape());
  Tensor dv = testing::poisoned(DType::f64, f.v.shape());
  backward(f.q.view(), f.k.view(), f.v.view(), f.attention.view(), d_attention.view(), f.lse.view(), dq.view(),
           dk.view(), dv.view(), f.options);
  Vec d_q = merge_heads(dq), d_k = merge_heads(dk);
  const Vec d_v = merge_heads(dv);
  // 2. Q, K ← RoPE(Q), RoPE(K): the gradient of a rotation is the rotation by the opposite angle
  if (dm.rope) {
    rotate(d_q, B, n, dm.H, d, o.query_position, *dm.rope, true);
    rotate(d_k, B, m, dm.Hkv, d, o.key_position, *dm.rope, true);
  }
  // 1. Q = X_q·W_qᵀ + b_q; K, V likewise
  linear_backward(d_q, x.xq, B * n, dm.E, p.wq, dm.q_width(), dm.bias, g.dxq, g.dw.wq, g.dw.bq);
  linear_backward(d_k, x.xk, B * m, dm.kdim, p.wk, dm.kv_width(), dm.bias, g.dxk, g.dw.wk, g.dw.bk);
  linear_backward(d_v, x.xv, B * m, dm.vdim, p.wv, dm.kv_width(), dm.bias, g.dxv, g.dw.wv, g.dw.bv);
  return g;
}

// ---- torch-style masks for a call ----

enum class PaddingMask : std::uint8_t { none, boolean, additive };
enum class AttnMask : std::uint8_t { none, bool_2d, float_2d, double_2d, bool_3d, float_3d };

// The masks' storage; the options hold views of it.
struct TorchMasks {
  Tensor key_padding, attn;
};

// Bool entries are true (masked out) with probability 0.3; floating ones are N(0, 1) with −inf at
// probability 0.1. With `first_key_visible` key 0 is never masked, so no row is fully masked (torch
// gives NaN for such rows, attnkit 0).
TorchMasks make_masks(Rng& rng, PaddingMask padding, AttnMask attn, int64_t B, int64_t H, int64_t n, int64_t m,
                      bool unbatched, MultiHeadAttentionOptions& o, bool first_key_visible = false) {
  TorchMasks masks;
  const auto fill = [&](Tensor& t, int64_t m_stride) {
    for (int64_t e = 0; e < t.numel(); ++e) {
      const bool spared = first_key_visible && e % m_stride == 0;
      if (t.dtype() == DType::boolean) {
        t.data<bool>()[e] = !spared && rng.uniform() < 0.3;
      } else {
        const double value = !spared && rng.uniform() < 0.1 ? -kInf : rng.normal();
        store_from_double(static_cast<std::byte*>(t.raw()) + e * static_cast<int64_t>(dtype_size(t.dtype())), t.dtype(),
                          value);
      }
    }
  };
  if (padding != PaddingMask::none) {
    const DType dtype = padding == PaddingMask::boolean ? DType::boolean : DType::f32;
    masks.key_padding = unbatched ? Tensor(dtype, {m}) : Tensor(dtype, {B, m});
    fill(masks.key_padding, m);
    o.key_padding_mask = masks.key_padding.view();
  }
  if (attn != AttnMask::none) {
    const bool is_bool = attn == AttnMask::bool_2d || attn == AttnMask::bool_3d;
    const DType dtype = is_bool ? DType::boolean : attn == AttnMask::double_2d ? DType::f64 : DType::f32;
    const bool per_head = attn == AttnMask::bool_3d || attn == AttnMask::float_3d;
    masks.attn = per_head ? Tensor(dtype, {B * H, n, m}) : Tensor(dtype, {n, m});
    fill(masks.attn, m);
    o.attn_mask = masks.attn.view();
  }
  return masks;
}

// ---- the module's side: inputs in the caller's layout ----

enum class InputLayout : std::uint8_t { batch_first, seq_first, unbatched };

InputLayout layout_of(const MultiHeadAttentionConfig& c, bool unbatched) {
  if (unbatched) return InputLayout::unbatched;
  return c.batch_first ? InputLayout::batch_first : InputLayout::seq_first;
}

std::vector<int64_t> caller_shape(int64_t B, int64_t S, int64_t W, InputLayout layout) {
  switch (layout) {
    case InputLayout::batch_first:
      return {B, S, W};
    case InputLayout::seq_first:
      return {S, B, W};
    case InputLayout::unbatched:
      return {S, W};
  }
  return {};
}

int64_t caller_index(int64_t b, int64_t s, int64_t w, int64_t B, int64_t S, int64_t W, InputLayout layout) {
  return layout == InputLayout::seq_first ? (s * B + b) * W + w : (b * S + s) * W + w;
}

// [B, S, W] (row-major) → a tensor of the caller's layout and dtype; unbatched needs B = 1.
Tensor to_caller(const Vec& x, int64_t B, int64_t S, int64_t W, InputLayout layout, DType dtype) {
  Vec laid(x.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t w = 0; w < W; ++w) laid[at(caller_index(b, s, w, B, S, W, layout))] = x[at((b * S + s) * W + w)];
  return tensor_of(laid, caller_shape(B, S, W, layout), dtype);
}

// A tensor of the caller's layout → [B, S, W]; checks its shape first.
Vec from_caller(const Tensor& t, int64_t B, int64_t S, int64_t W, InputLayout layout) {
  EXPECT_EQ(t.shape(), caller_shape(B, S, W, layout));
  if (t.shape() != caller_shape(B, S, W, layout)) return {};
  Vec x(at(B * S * W));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t w = 0; w < W; ++w)
        x[at((b * S + s) * W + w)] = testing::value(t, caller_index(b, s, w, B, S, W, layout));
  return x;
}

// Every parameter drawn afresh (the biases too, which torch's initialisation leaves at zero), stored
// in the module's weight dtype; the composition reads them back from the state dict.
void randomize(MultiHeadAttention& module, Rng& rng) {
  for (const std::string& name : module.parameter_names()) {
    Tensor& t = module.parameter(name);
    const double scale = t.rank() == 1 ? 0.5 : 1.5 / std::sqrt(static_cast<double>(t.shape()[1]));
    for (int64_t e = 0; e < t.numel(); ++e) {
      store_from_double(static_cast<std::byte*>(t.raw()) + e * static_cast<int64_t>(dtype_size(t.dtype())), t.dtype(),
                        scale * rng.normal());
    }
  }
}

// ---- comparison ----

// The float32 module against the float64 composition, relative to scale = max(1, max |reference|) of
// each compared tensor. Float32 rounding (2^-24 ≈ 6e-8 per operation) through two projections of
// width ≤ 16, a softmax and its backward measures below 4e-6 · scale at worst over these cases
// (RMS below 8e-7 · scale); the bounds leave a margin for other seeds while a wrong index, mask or
// missing term (errors ≥ 1e-2) fails by orders of magnitude.
constexpr double kMaxTolerance = 1e-4;
constexpr double kRmsTolerance = 1e-5;
// An output stored in bf16 (the module returns `out` in the query's dtype) is rounded once more: to
// 8 significant bits, a relative error ≤ 2^-9; allowed on top, per element, with a factor 2 margin.
constexpr double kBf16Rounding = 0x1p-8;

void expect_close(const std::string& what, const Vec& actual, const Vec& expected, double rounding = 0.0) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  double scale = 1, sum = 0, worst_excess = -kInf;
  std::size_t worst_at = 0;
  for (double e : expected) scale = std::max(scale, std::fabs(e));
  for (std::size_t i = 0; i < actual.size(); ++i) {
    ASSERT_TRUE(std::isfinite(actual[i]) && std::isfinite(expected[i]))
        << what << " element " << i << ": " << actual[i] << " vs reference " << expected[i];
    const double diff = std::fabs(actual[i] - expected[i]);
    sum += diff * diff;
    const double excess = diff - (kMaxTolerance * scale + rounding * std::fabs(expected[i]));
    if (excess > worst_excess) {
      worst_excess = excess;
      worst_at = i;
    }
  }
  if (actual.empty()) return;
  const double rms = std::sqrt(sum / static_cast<double>(actual.size()));
  EXPECT_LE(worst_excess, 0.0) << what << ": element " << worst_at << " is " << actual[worst_at] << ", reference "
                               << expected[worst_at] << ": off by " << std::fabs(actual[worst_at] - expected[worst_at])
                               << " (scale " << scale << ", tolerance " << kMaxTolerance << " · scale"
                               << (rounding > 0 ? " + rounding · |reference|" : "") << ")";
  EXPECT_LE(rms, (kRmsTolerance + rounding) * scale) << what << ": RMS difference (scale " << scale << ")";
}

// The composition's probabilities as the module returns its weights: [B, H, n, m] per head, or the
// mean over heads [B, n, m].
Vec expected_weights(const Tensor& probs, bool average) {
  const Vec all = testing::values(probs);
  if (!average) return all;
  const int64_t B = probs.shape()[0], H = probs.shape()[1], plane = probs.shape()[2] * probs.shape()[3];
  Vec mean(at(B * plane), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t e = 0; e < plane; ++e)
        mean[at(b * plane + e)] += all[at((b * H + h) * plane + e)] / static_cast<double>(H);
  return mean;
}

template <class Fn>
void expect_error(Fn&& fn, ErrorCode code, const std::string& named, const std::string& context = "") {
  try {
    fn();
    ADD_FAILURE() << context << ": no error; expected " << error_code_name(code) << " naming '" << named << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << context << ": " << error_code_name(e.code()) << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find(named), std::string::npos)
        << context << ": the message does not name '" << named << "': " << e.what();
  }
}

// ---- the cases ----

struct MhaCase {
  std::string name;
  MultiHeadAttentionConfig config;
  int64_t batch = 2, n = 5, m = 7;
  bool self = false;       // query = key = value, one tensor (m = n; kdim = vdim = embed_dim)
  bool unbatched = false;  // inputs [S, width]; batch must be 1
  PaddingMask padding = PaddingMask::none;
  AttnMask attn = AttnMask::none;
  DType input_dtype = DType::f32;
  std::function<void(MultiHeadAttentionOptions&)> set = [](MultiHeadAttentionOptions&) {};
};

void PrintTo(const MhaCase& c, std::ostream* os) {
  *os << c.name << " B=" << c.batch << " n=" << c.n << " m=" << (c.self ? c.n : c.m);
}

std::string case_name(const ::testing::TestParamInfo<MhaCase>& info) { return info.param.name; }

std::uint64_t salt_of(const std::string& name) { return std::hash<std::string>{}(name); }

// Inputs of a case: f32-exact (or exact in the case's input dtype) values in the composition's layout.
Sequences random_sequences(Rng& rng, const MhaCase& c, const Dims& dm, DType exact_in) {
  Sequences x;
  x.B = c.batch;
  x.n = c.n;
  x.m = c.self ? c.n : c.m;
  x.xq = random_values(rng, x.B * x.n * dm.E, 1.0, exact_in);
  x.xk = c.self ? x.xq : random_values(rng, x.B * x.m * dm.kdim, 1.0, exact_in);
  x.xv = c.self ? x.xq : random_values(rng, x.B * x.m * dm.vdim, 1.0, exact_in);
  return x;
}

// ---- 1. the oracle: the composition's gradients against central finite differences ----

class CompositionOracle : public ::testing::TestWithParam<MhaCase> {};

TEST_P(CompositionOracle, GradientsMatchFiniteDifferencesOfItsForward) {
  ATTNKIT_TRACE_SEED();
  const MhaCase& c = GetParam();
  Rng rng(salt_of(c.name));
  const Dims dm = dims_of(c.config);
  Params p = random_params(rng, dm);
  Sequences x = random_sequences(rng, c, dm, DType::f64);
  MultiHeadAttentionOptions o;
  c.set(o);
  // Key 0 stays visible, so that no draw of the masks hides every key from every query.
  const TorchMasks masks = make_masks(rng, c.padding, c.attn, x.B, dm.H, x.n, x.m, c.unbatched, o, true);
  const Vec dy = random_values(rng, x.B * x.n * dm.E, 1.0);
  const CompositionForward f = composition_forward(dm, p, x, o, c.unbatched);
  const CompositionGradients g = composition_backward(dm, p, x, o, f, dy);
  const auto loss = [&] { return dot(composition_forward(dm, p, x, o, c.unbatched).y, dy); };  // L = Σ dy ∘ y

  constexpr double kStep = 1e-6;       // central differences: truncation ~ step², rounding ~ 1e-16 · |L| / step
  constexpr double kTolerance = 1e-6;  // relative to 1 + |gradient|; measured below 1e-8
  const std::vector<std::tuple<const char*, Vec*, const Vec*>> checks = {
      {"query", &x.xq, &g.dxq}, {"key", &x.xk, &g.dxk},   {"value", &x.xv, &g.dxv}, {"W_q", &p.wq, &g.dw.wq},
      {"W_k", &p.wk, &g.dw.wk}, {"W_v", &p.wv, &g.dw.wv}, {"W_o", &p.wo, &g.dw.wo}, {"b_q", &p.bq, &g.dw.bq},
      {"b_k", &p.bk, &g.dw.bk}, {"b_v", &p.bv, &g.dw.bv}, {"b_o", &p.bo, &g.dw.bo}};
  int64_t checked = 0;
  double largest = 0;
  for (const auto& [name, input, grad] : checks) {
    ASSERT_EQ(input->size(), grad->size()) << name;
    for (std::size_t i = 0; i < input->size(); ++i) {
      double& xi = (*input)[i];
      const double saved = xi;
      xi = saved + kStep;
      const double up = loss();
      xi = saved - kStep;
      const double down = loss();
      xi = saved;
      const double numeric = (up - down) / (2 * kStep), exact = (*grad)[i];
      ASSERT_NEAR(exact, numeric, kTolerance * (1 + std::fabs(exact))) << name << " element " << i;
      largest = std::max(largest, std::fabs(exact));
      ++checked;
    }
  }
  EXPECT_GT(checked, 100);
  EXPECT_GT(largest, 0.1);  // the gradients are not trivially zero
}

// clang-format off
INSTANTIATE_TEST_SUITE_P(
    Options, CompositionOracle,
    ::testing::Values(
        MhaCase{.name = "packed_bias_both_masks_dropout",
                .config = {.embed_dim = 4, .num_heads = 2},
                .batch = 2, .n = 3, .m = 4,
                .padding = PaddingMask::additive,
                .attn = AttnMask::bool_3d,
                .set = [](MultiHeadAttentionOptions& o) { o.dropout_p = 0.2; o.seed = 9; }},
        MhaCase{.name = "gqa_cross_rope_half_split_causal_window",
                .config = {.embed_dim = 5, .num_heads = 4, .num_kv_heads = 2, .head_dim = 2, .kdim = 3, .vdim = 4,
                           .rope = RopeConfig{100.0, RopeLayout::half_split}},
                .batch = 2, .n = 3, .m = 5,
                .attn = AttnMask::float_2d,
                .set = [](MultiHeadAttentionOptions& o) {
                  o.causal = Causal::bottom_right;
                  o.window = {2, 0};
                  o.query_position = 3;
                  o.key_position = 1;
                }},
        MhaCase{.name = "mqa_rope_interleaved_no_bias_unbatched",
                .config = {.embed_dim = 6, .num_heads = 2, .num_kv_heads = 1, .head_dim = 4, .bias = false,
                           .rope = RopeConfig{30.0, RopeLayout::interleaved}},
                .batch = 1, .n = 4, .m = 3,
                .unbatched = true,
                .padding = PaddingMask::boolean,
                .attn = AttnMask::float_3d,
                .set = [](MultiHeadAttentionOptions& o) {
                  o.causal = Causal::top_left;
                  o.query_position = 5;
                  o.key_position = 2;
                }}),
    case_name);
// clang-format on

// ---- 2. the module against the composition ----

class ModuleVsComposition : public ::testing::TestWithParam<MhaCase> {};

TEST_P(ModuleVsComposition, OutputWeightsAndEveryGradient) {
  ATTNKIT_TRACE_SEED();
  const MhaCase& c = GetParam();
  Rng rng(salt_of(c.name));
  MultiHeadAttention module(c.config, 3);
  randomize(module, rng);
  const Dims dm = dims_of(c.config);
  const Params p = params_from_state(module.state_dict(), dm);
  const Sequences x = random_sequences(rng, c, dm, c.input_dtype == DType::f64 ? DType::f32 : c.input_dtype);
  const InputLayout layout = layout_of(c.config, c.unbatched);
  const Tensor query = to_caller(x.xq, x.B, x.n, dm.E, layout, c.input_dtype);
  const Tensor key = c.self ? Tensor() : to_caller(x.xk, x.B, x.m, dm.kdim, layout, c.input_dtype);
  const Tensor value = c.self ? Tensor() : to_caller(x.xv, x.B, x.m, dm.vdim, layout, c.input_dtype);
  MultiHeadAttentionOptions o;
  c.set(o);
  const TorchMasks masks = make_masks(rng, c.padding, c.attn, x.B, dm.H, x.n, x.m, c.unbatched, o);

  // Forward.
  MultiHeadAttentionContext context;
  const MultiHeadAttentionOutput out = module.forward(query.view(), c.self ? query.view() : key.view(),
                                                      c.self ? query.view() : value.view(), o, &context);
  const CompositionForward f = composition_forward(dm, p, x, o, c.unbatched);
  EXPECT_EQ(out.out.dtype(), c.input_dtype);
  expect_close("out", from_caller(out.out, x.B, x.n, dm.E, layout), f.y,
               c.input_dtype == DType::bf16 ? kBf16Rounding : 0.0);
  if (o.need_weights) {
    ASSERT_TRUE(out.weights.has_value());
    std::vector<int64_t> shape =
        o.average_attn_weights ? std::vector<int64_t>{x.B, x.n, x.m} : std::vector<int64_t>{x.B, dm.H, x.n, x.m};
    if (c.unbatched) shape.erase(shape.begin());
    EXPECT_EQ(out.weights->shape(), shape);
    EXPECT_EQ(out.weights->dtype(), DType::f32);
    expect_close("weights", testing::values(*out.weights), expected_weights(f.probs, o.average_attn_weights));
  } else {
    EXPECT_FALSE(out.weights.has_value());
  }

  // Backward of L = Σ d_out ∘ out.
  const Vec dy = random_values(rng, x.B * x.n * dm.E, 1.0, DType::f32);
  const Tensor d_out = to_caller(dy, x.B, x.n, dm.E, layout, DType::f32);
  const MultiHeadAttentionGradients g = module.backward(context, d_out.view());
  const CompositionGradients expected = composition_backward(dm, p, x, o, f, dy);
  expect_close("d_query", from_caller(g.d_query, x.B, x.n, dm.E, layout), expected.dxq);
  expect_close("d_key", from_caller(g.d_key, x.B, x.m, dm.kdim, layout), expected.dxk);
  expect_close("d_value", from_caller(g.d_value, x.B, x.m, dm.vdim, layout), expected.dxv);
  for (const Tensor* t : {&g.d_query, &g.d_key, &g.d_value}) EXPECT_EQ(t->dtype(), DType::f32);
  const std::map<std::string, Vec> expected_weights = state_of(expected.dw, dm);
  std::set<std::string> names;
  for (const auto& [name, grad] : g.d_weights) names.insert(name);
  std::set<std::string> expected_names;
  for (const auto& [name, grad] : expected_weights) expected_names.insert(name);
  EXPECT_EQ(names, expected_names);
  for (const auto& [name, grad] : expected_weights) {
    const auto it = g.d_weights.find(name);
    if (it == g.d_weights.end()) continue;
    EXPECT_EQ(it->second.shape(), module.parameter(name).shape()) << name;
    EXPECT_EQ(it->second.dtype(), DType::f32) << name;
    expect_close("d_weights[" + name + "]", testing::values(it->second), grad);
  }
}

// Shorthands for the cases' configurations.
MultiHeadAttentionConfig self_config(int64_t embed_dim, int64_t heads) {
  return {.embed_dim = embed_dim, .num_heads = heads};
}
MultiHeadAttentionConfig cross_config() {  // kdim ≠ vdim ≠ embed_dim
  return {.embed_dim = 10, .num_heads = 2, .kdim = 7, .vdim = 9};
}
MultiHeadAttentionConfig gqa_config() { return {.embed_dim = 12, .num_heads = 4, .num_kv_heads = 2}; }

// clang-format off
std::vector<MhaCase> module_cases() {
  using O = MultiHeadAttentionOptions;
  std::vector<MhaCase> cases = {
      // Shapes and layouts.
      {.name = "self_attention", .config = self_config(12, 3), .n = 7, .self = true},
      {.name = "cross_attention_kdim_vdim", .config = cross_config(), .n = 5, .m = 8},
      {.name = "gqa", .config = gqa_config(), .n = 6, .m = 9},
      {.name = "mqa", .config = {.embed_dim = 12, .num_heads = 4, .num_kv_heads = 1, .kdim = 5}, .n = 5, .m = 6},
      {.name = "head_dim_not_embed_over_heads", .config = {.embed_dim = 10, .num_heads = 3, .head_dim = 5},
       .n = 4, .m = 7},
      {.name = "head_dim_small_self", .config = {.embed_dim = 9, .num_heads = 2, .head_dim = 3}, .n = 6, .self = true},
      {.name = "bias_off", .config = {.embed_dim = 9, .num_heads = 3, .bias = false}, .n = 5, .m = 6},
      {.name = "bias_off_cross", .config = {.embed_dim = 8, .num_heads = 2, .kdim = 3, .vdim = 5, .bias = false}},
      {.name = "seq_first", .config = {.embed_dim = 9, .num_heads = 3, .batch_first = false},
       .batch = 3, .n = 5, .m = 6},
      {.name = "seq_first_self", .config = {.embed_dim = 8, .num_heads = 2, .batch_first = false},
       .batch = 3, .n = 4, .self = true},
      {.name = "unbatched", .config = cross_config(), .batch = 1, .n = 5, .m = 7, .unbatched = true},
      {.name = "unbatched_seq_first_config", .config = {.embed_dim = 8, .num_heads = 2, .batch_first = false},
       .batch = 1, .n = 6, .m = 3, .unbatched = true},
      {.name = "input_f64", .config = self_config(8, 2), .n = 5, .self = true, .input_dtype = DType::f64},
      {.name = "input_bf16", .config = cross_config(), .n = 3, .m = 5, .input_dtype = DType::bf16},
      // RoPE.
      {.name = "rope_half_split", .config = {.embed_dim = 12, .num_heads = 2, .rope = RopeConfig{}}, .n = 5, .m = 7,
       .set = [](O& o) { o.query_position = 5; o.key_position = 2; }},
      {.name = "rope_interleaved",
       .config = {.embed_dim = 12, .num_heads = 2, .rope = RopeConfig{500.0, RopeLayout::interleaved}},
       .n = 5, .m = 7, .set = [](O& o) { o.query_position = 3; o.key_position = 11; }},
      {.name = "rope_half_split_gqa_self",
       .config = {.embed_dim = 16, .num_heads = 4, .num_kv_heads = 2, .rope = RopeConfig{77.0}},
       .n = 6, .self = true, .set = [](O& o) { o.query_position = 9; o.key_position = 9; }},
      {.name = "rope_interleaved_mqa_long_positions",
       .config = {.embed_dim = 8, .num_heads = 2, .num_kv_heads = 1, .head_dim = 6,
                  .rope = RopeConfig{10000.0, RopeLayout::interleaved}},
       .n = 3, .m = 5, .set = [](O& o) { o.query_position = 1000; o.key_position = 997; }},
      // Masks, in torch's meanings.
      {.name = "key_padding_bool", .config = gqa_config(), .n = 4, .m = 9, .padding = PaddingMask::boolean},
      {.name = "key_padding_float", .config = cross_config(), .n = 4, .m = 9, .padding = PaddingMask::additive},
      {.name = "attn_mask_bool_2d", .config = self_config(9, 3), .n = 6, .m = 7, .attn = AttnMask::bool_2d},
      {.name = "attn_mask_float_2d", .config = self_config(9, 3), .n = 6, .m = 7, .attn = AttnMask::float_2d},
      {.name = "attn_mask_double_2d", .config = cross_config(), .n = 3, .m = 4, .attn = AttnMask::double_2d},
      {.name = "attn_mask_bool_3d", .config = gqa_config(), .batch = 3, .n = 5, .m = 6, .attn = AttnMask::bool_3d},
      {.name = "attn_mask_float_3d", .config = self_config(9, 3), .n = 5, .m = 6, .attn = AttnMask::float_3d},
      {.name = "both_masks_bool", .config = self_config(8, 2), .n = 5, .m = 6,
       .padding = PaddingMask::boolean, .attn = AttnMask::bool_3d},
      {.name = "both_masks_float", .config = gqa_config(), .n = 5, .m = 6,
       .padding = PaddingMask::additive, .attn = AttnMask::float_3d},
      {.name = "both_masks_float_padding_bool_attn", .config = cross_config(), .n = 5, .m = 6,
       .padding = PaddingMask::additive, .attn = AttnMask::bool_2d},
      {.name = "both_masks_bool_padding_float_attn", .config = self_config(8, 2), .n = 5, .m = 6,
       .padding = PaddingMask::boolean, .attn = AttnMask::float_2d},
      // A per-head mask over one sequence: [B·H, n, m] with B = 1, and [H, n, m] unbatched.
      {.name = "batch1_attn_mask_bool_3d", .config = self_config(12, 3), .batch = 1, .n = 5, .m = 6,
       .attn = AttnMask::bool_3d},
      {.name = "batch1_both_masks_per_head", .config = self_config(12, 3), .batch = 1, .n = 5, .m = 6,
       .padding = PaddingMask::boolean, .attn = AttnMask::float_3d},
      {.name = "unbatched_attn_mask_bool_3d", .config = self_config(8, 2), .batch = 1, .n = 4, .m = 5,
       .unbatched = true,
       .attn = AttnMask::bool_3d},
      {.name = "unbatched_attn_mask_float_3d", .config = self_config(8, 2), .batch = 1, .n = 4, .m = 5,
       .unbatched = true,
       .attn = AttnMask::float_3d},
      {.name = "unbatched_key_padding", .config = cross_config(), .batch = 1, .n = 4, .m = 7, .unbatched = true,
       .padding = PaddingMask::additive, .set = [](O& o) { o.need_weights = true; o.average_attn_weights = false; }},
      // Causal and window.
      {.name = "causal_top_left_self", .config = self_config(9, 3), .n = 7, .self = true,
       .set = [](O& o) { o.causal = Causal::top_left; }},
      {.name = "causal_top_left_more_keys", .config = cross_config(), .n = 4, .m = 7,
       .set = [](O& o) { o.causal = Causal::top_left; }},
      {.name = "causal_bottom_right_more_keys", .config = gqa_config(), .n = 4, .m = 9,
       .set = [](O& o) { o.causal = Causal::bottom_right; }},
      {.name = "causal_bottom_right_more_queries", .config = cross_config(), .n = 8, .m = 5,  // rows 0..2 see no key
       .set = [](O& o) { o.causal = Causal::bottom_right; o.need_weights = true; }},
      {.name = "window", .config = self_config(9, 3), .n = 7, .self = true, .set = [](O& o) { o.window = {2, 1}; }},
      {.name = "window_causal", .config = gqa_config(), .n = 6, .m = 8,
       .set = [](O& o) { o.causal = Causal::bottom_right; o.window = {3, 0}; }},
      // Dropout: the composition uses the same seed, so the reference draws the kernel's Philox stream.
      {.name = "dropout", .config = self_config(9, 3), .n = 7, .m = 6,
       .set = [](O& o) { o.dropout_p = 0.2; o.seed = 1234; }},
      {.name = "dropout_gqa_masks", .config = gqa_config(), .n = 5, .m = 7, .padding = PaddingMask::boolean,
       .set = [](O& o) { o.dropout_p = 0.2; o.seed = 99; }},
      // Attention weights.
      {.name = "need_weights_average", .config = gqa_config(), .n = 5, .m = 7, .attn = AttnMask::float_2d,
       .set = [](O& o) { o.need_weights = true; }},
      {.name = "need_weights_per_head", .config = cross_config(), .n = 5, .m = 7, .padding = PaddingMask::boolean,
       .set = [](O& o) { o.need_weights = true; o.average_attn_weights = false; o.causal = Causal::top_left; }},
      {.name = "need_weights_with_dropout", .config = self_config(8, 2), .n = 6, .self = true,
       .set = [](O& o) { o.need_weights = true; o.dropout_p = 0.2; o.seed = 5; }},
      {.name = "need_weights_unbatched_average", .config = gqa_config(), .batch = 1, .n = 3, .m = 5, .unbatched = true,
       .set = [](O& o) { o.need_weights = true; }},
      // The reference kernel, asked for by name.
      {.name = "kernel_reference", .config = gqa_config(), .n = 4, .m = 6, .padding = PaddingMask::additive,
       .set = [](O& o) { o.kernel = Kernel::reference; o.dropout_p = 0.2; o.seed = 3; o.causal = Causal::top_left; }},
      // bf16 weights, computed in float32: compared with the composition on the bf16-rounded weights.
      {.name = "bf16_weights", .config = {.embed_dim = 12, .num_heads = 3, .weight_dtype = DType::bf16},
       .n = 5, .self = true,
       .set = [](O& o) { o.need_weights = true; }},
      {.name = "bf16_weights_cross_gqa_rope",
       .config = {.embed_dim = 12, .num_heads = 4, .num_kv_heads = 2, .head_dim = 4, .kdim = 7, .vdim = 5,
                  .rope = RopeConfig{1000.0, RopeLayout::interleaved}, .weight_dtype = DType::bf16},
       .n = 5, .m = 6, .padding = PaddingMask::boolean, .set = [](O& o) { o.query_position = 4; }},
      // Everything at once.
      {.name = "everything",
       .config = {.embed_dim = 11, .num_heads = 4, .num_kv_heads = 2, .head_dim = 4, .kdim = 6, .vdim = 5,
                  .batch_first = false, .rope = RopeConfig{300.0, RopeLayout::interleaved}},
       .batch = 3, .n = 5, .m = 9, .padding = PaddingMask::boolean, .attn = AttnMask::float_3d,
       .set = [](O& o) {
         o.causal = Causal::bottom_right;
         o.window = {5, 1};
         o.dropout_p = 0.2;
         o.seed = 424242;
         o.need_weights = true;
         o.average_attn_weights = false;
         o.query_position = 4;
         o.key_position = 0;
       }},
      {.name = "everything_unbatched_half_split",
       .config = {.embed_dim = 10, .num_heads = 2, .num_kv_heads = 1, .head_dim = 6, .kdim = 4, .vdim = 10,
                  .bias = false, .rope = RopeConfig{}},
       .batch = 1, .n = 6, .m = 4, .unbatched = true, .padding = PaddingMask::additive, .attn = AttnMask::bool_3d,
       .set = [](O& o) {
         o.causal = Causal::top_left;
         o.window = {1, -1};
         o.dropout_p = 0.2;
         o.seed = 8;
         o.need_weights = true;
         o.query_position = 2;
         o.key_position = 7;
       }},
      // Empty sizes: the same comparison, with zero-sized results.
      {.name = "empty_queries", .config = cross_config(), .n = 0, .m = 5,
       .padding = PaddingMask::boolean, .attn = AttnMask::float_2d,
       .set = [](O& o) { o.need_weights = true; }},
      {.name = "empty_keys", .config = cross_config(), .n = 4, .m = 0, .padding = PaddingMask::boolean,
       .set = [](O& o) { o.need_weights = true; o.average_attn_weights = false; }},
      {.name = "empty_batch", .config = gqa_config(), .batch = 0, .n = 3, .m = 4,
       .padding = PaddingMask::additive, .attn = AttnMask::bool_3d},
      {.name = "empty_unbatched_keys", .config = self_config(8, 2), .batch = 1, .n = 3, .m = 0, .unbatched = true},
  };
  return cases;
}
// clang-format on

INSTANTIATE_TEST_SUITE_P(EveryOption, ModuleVsComposition, ::testing::ValuesIn(module_cases()), case_name);

// The context keeps its own copies of the inputs: overwriting them between forward and backward
// changes nothing.
TEST(MultiHeadAttentionContext, OwnsCopiesOfTheInputs) {
  ATTNKIT_TRACE_SEED();
  Rng rng(7);
  MultiHeadAttention module(cross_config(), 1);
  randomize(module, rng);
  Tensor query = testing::random_tensor(rng, {2, 4, 10}, DType::f32);
  Tensor key = testing::random_tensor(rng, {2, 5, 7}, DType::f32);
  Tensor value = testing::random_tensor(rng, {2, 5, 9}, DType::f32);
  const Tensor d_out = testing::random_tensor(rng, {2, 4, 10}, DType::f32);
  MultiHeadAttentionContext a, b;
  module.forward(query.view(), key.view(), value.view(), {}, &a);
  module.forward(query.view(), key.view(), value.view(), {}, &b);
  for (Tensor* t : {&query, &key, &value}) testing::poison(*t);
  const MultiHeadAttentionGradients ga = module.backward(a, d_out.view()), gb = module.backward(b, d_out.view());
  EXPECT_FALSE(testing::has_nan(ga.d_query) || testing::has_nan(ga.d_key) || testing::has_nan(ga.d_value));
  EXPECT_TRUE(testing::bitwise_equal(ga.d_query, gb.d_query) && testing::bitwise_equal(ga.d_key, gb.d_key) &&
              testing::bitwise_equal(ga.d_value, gb.d_value));
}

// Inputs and d_out are views of any strides: a [S, B, width] buffer seen as [B, S, width] gives the
// results of its contiguous copy, bitwise.
TEST(MultiHeadAttentionStrides, PermutedViewsGiveTheContiguousResults) {
  ATTNKIT_TRACE_SEED();
  Rng rng(16);
  MultiHeadAttention module(cross_config(), 1);
  randomize(module, rng);
  const Tensor query = testing::random_tensor(rng, {4, 2, 10}, DType::f32);  // [S, B, width] in memory
  const Tensor key = testing::random_tensor(rng, {5, 2, 7}, DType::f32);
  const Tensor value = testing::random_tensor(rng, {5, 2, 9}, DType::f32);
  const Tensor d_out = testing::random_tensor(rng, {4, 2, 10}, DType::f32);
  const auto permuted = [](const Tensor& t) { return t.view().permuted({1, 0, 2}); };
  const auto copy = [&](const Tensor& t) { return Tensor::converted(permuted(t), DType::f32); };
  MultiHeadAttentionContext strided_context, contiguous_context;
  const MultiHeadAttentionOutput strided =
      module.forward(permuted(query), permuted(key), permuted(value), {}, &strided_context);
  const MultiHeadAttentionOutput contiguous =
      module.forward(copy(query).view(), copy(key).view(), copy(value).view(), {}, &contiguous_context);
  EXPECT_TRUE(testing::bitwise_equal(strided.out, contiguous.out));
  const MultiHeadAttentionGradients a = module.backward(strided_context, permuted(d_out));
  const MultiHeadAttentionGradients b = module.backward(contiguous_context, copy(d_out).view());
  EXPECT_TRUE(testing::bitwise_equal(a.d_query, b.d_query) && testing::bitwise_equal(a.d_key, b.d_key) &&
              testing::bitwise_equal(a.d_value, b.d_value));
  for (const auto& [name, t] : a.d_weights) EXPECT_TRUE(testing::bitwise_equal(t, b.d_weights.at(name))) << name;
}

// ---- 3. bf16 weights ----

TEST(MultiHeadAttentionBf16, StoresWeightsRoundedToBf16AndComputesWithThem) {
  ATTNKIT_TRACE_SEED();
  Rng rng(8);
  const MultiHeadAttentionConfig config{.embed_dim = 8, .num_heads = 2, .kdim = 6, .weight_dtype = DType::bf16};
  const Dims dm = dims_of(config);
  const Params exact = random_params(rng, dm);  // float64 values, not representable in bf16
  MultiHeadAttention module(config, 2);
  module.load_state_dict(state_tensors(exact, dm, DType::f64));
  for (const auto& [name, t] : module.state_dict()) EXPECT_EQ(t.dtype(), DType::bf16) << name;
  const std::map<std::string, Vec> loaded = state_of(params_from_state(module.state_dict(), dm), dm);
  for (const auto& [name, values] : state_of(exact, dm)) {
    const Vec& stored = loaded.at(name);
    for (std::size_t i = 0; i < values.size(); ++i)
      ASSERT_EQ(stored[i], round_to(DType::bf16, values[i])) << name << " " << i;
  }
  // The output is the composition's on the rounded weights (the case list checks the gradients too).
  Sequences x;
  x.B = 2;
  x.n = 3;
  x.m = 4;
  x.xq = random_values(rng, 2 * 3 * 8, 1.0, DType::f32);
  x.xk = random_values(rng, 2 * 4 * 6, 1.0, DType::f32);
  x.xv = random_values(rng, 2 * 4 * 8, 1.0, DType::f32);
  const MultiHeadAttentionOutput out = module.forward(
      tensor_of(x.xq, {2, 3, 8}).view(), tensor_of(x.xk, {2, 4, 6}).view(), tensor_of(x.xv, {2, 4, 8}).view());
  const Params rounded = params_from_state(module.state_dict(), dm);
  expect_close("out", testing::values(out.out), composition_forward(dm, rounded, x, {}, false).y);
}

// ---- 4. state dicts and files ----

std::set<std::string> names_of(const std::map<std::string, Tensor>& state) {
  std::set<std::string> names;
  for (const auto& [name, t] : state) names.insert(name);
  return names;
}

TEST(MultiHeadAttentionStateDict, NamesAndShapesFollowTorch) {
  const std::vector<std::pair<MultiHeadAttentionConfig, Shapes>> cases = {
      {{.embed_dim = 8, .num_heads = 2},
       {{"in_proj_weight", {24, 8}}, {"in_proj_bias", {24}}, {"out_proj.weight", {8, 8}}, {"out_proj.bias", {8}}}},
      {{.embed_dim = 8, .num_heads = 2, .bias = false}, {{"in_proj_weight", {24, 8}}, {"out_proj.weight", {8, 8}}}},
      // The defaults given explicitly.
      {{.embed_dim = 8, .num_heads = 2, .head_dim = 4, .kdim = 8, .vdim = 8, .batch_first = false},
       {{"in_proj_weight", {24, 8}}, {"in_proj_bias", {24}}, {"out_proj.weight", {8, 8}}, {"out_proj.bias", {8}}}},
      {{.embed_dim = 8, .num_heads = 2, .kdim = 5, .vdim = 3},
       {{"q_proj_weight", {8, 8}},
        {"k_proj_weight", {8, 5}},
        {"v_proj_weight", {8, 3}},
        {"in_proj_bias", {24}},
        {"out_proj.weight", {8, 8}},
        {"out_proj.bias", {8}}}},
      {{.embed_dim = 8, .num_heads = 2, .vdim = 3, .bias = false},
       {{"q_proj_weight", {8, 8}}, {"k_proj_weight", {8, 8}}, {"v_proj_weight", {8, 3}}, {"out_proj.weight", {8, 8}}}},
      {{.embed_dim = 12, .num_heads = 4, .num_kv_heads = 2},  // GQA: k and v are narrower
       {{"q_proj_weight", {12, 12}},
        {"k_proj_weight", {6, 12}},
        {"v_proj_weight", {6, 12}},
        {"in_proj_bias", {24}},
        {"out_proj.weight", {12, 12}},
        {"out_proj.bias", {12}}}},
      {{.embed_dim = 12, .num_heads = 4, .num_kv_heads = 1, .kdim = 5},  // MQA
       {{"q_proj_weight", {12, 12}},
        {"k_proj_weight", {3, 5}},
        {"v_proj_weight", {3, 12}},
        {"in_proj_bias", {18}},
        {"out_proj.weight", {12, 12}},
        {"out_proj.bias", {12}}}},
      {{.embed_dim = 10, .num_heads = 3, .head_dim = 5},  // H·d = 15 ≠ E
       {{"q_proj_weight", {15, 10}},
        {"k_proj_weight", {15, 10}},
        {"v_proj_weight", {15, 10}},
        {"in_proj_bias", {45}},
        {"out_proj.weight", {10, 15}},
        {"out_proj.bias", {10}}}},
      {{.embed_dim = 8, .num_heads = 2, .weight_dtype = DType::bf16},
       {{"in_proj_weight", {24, 8}}, {"in_proj_bias", {24}}, {"out_proj.weight", {8, 8}}, {"out_proj.bias", {8}}}},
  };
  for (const auto& [config, expected] : cases) {
    const MultiHeadAttention module(config);
    std::vector<std::string> names;
    for (const auto& [name, shape] : expected) names.push_back(name);
    EXPECT_EQ(module.parameter_names(), names) << "in torch's state-dict order";
    EXPECT_EQ(torch_parameters(dims_of(config)), expected) << "the test's own layout";
    const std::map<std::string, Tensor> state = module.state_dict();
    ASSERT_EQ(state.size(), expected.size());
    for (const auto& [name, shape] : expected) {
      ASSERT_EQ(state.count(name), 1u) << name;
      EXPECT_EQ(state.at(name).shape(), shape) << name;
      EXPECT_EQ(state.at(name).dtype(), config.weight_dtype) << name;
      EXPECT_EQ(module.parameter(name).shape(), shape) << name;
    }
  }
  expect_error([] { (void)MultiHeadAttention({.embed_dim = 8, .num_heads = 2}).parameter("bias_k"); },
               ErrorCode::invalid_argument, "bias_k");
}

// torch's initialisation: Xavier-uniform projections (over the whole in_proj_weight), the output
// projection as nn.Linear's default, zero biases; the same seed gives the same weights.
TEST(MultiHeadAttentionStateDict, InitialisesAsTorchDoes) {
  const MultiHeadAttentionConfig config{.embed_dim = 16, .num_heads = 4, .kdim = 16, .vdim = 16};
  const MultiHeadAttention a(config, 11), b(config, 11), c(config, 12);
  for (const std::string& name : a.parameter_names()) {
    EXPECT_TRUE(testing::bitwise_equal(a.parameter(name), b.parameter(name))) << name;
    const Vec v = testing::values(a.parameter(name));
    double largest = 0;
    for (double x : v) largest = std::max(largest, std::fabs(x));
    if (name == "in_proj_weight") {
      EXPECT_LE(largest, std::sqrt(6.0 / (48 + 16))) << name;
      EXPECT_GT(largest, 0.8 * std::sqrt(6.0 / (48 + 16))) << name;
    } else if (name == "out_proj.weight") {
      EXPECT_LE(largest, 1.0 / std::sqrt(16.0)) << name;
      EXPECT_GT(largest, 0.8 / std::sqrt(16.0)) << name;
    } else {
      EXPECT_EQ(largest, 0.0) << name;
    }
    if (largest > 0) {
      EXPECT_FALSE(testing::bitwise_equal(a.parameter(name), c.parameter(name))) << name;
    }
  }
}

// The outputs of two modules on one input, bitwise.
bool same_outputs(const MultiHeadAttention& a, const MultiHeadAttention& b, Rng& rng) {
  const Dims dm = dims_of(a.config());
  const InputLayout layout = layout_of(a.config(), false);
  const Tensor query = to_caller(random_values(rng, 2 * 3 * dm.E, 1.0), 2, 3, dm.E, layout, DType::f32);
  const Tensor key = to_caller(random_values(rng, 2 * 4 * dm.kdim, 1.0), 2, 4, dm.kdim, layout, DType::f32);
  const Tensor value = to_caller(random_values(rng, 2 * 4 * dm.vdim, 1.0), 2, 4, dm.vdim, layout, DType::f32);
  const Tensor out_a = a.forward(query.view(), key.view(), value.view()).out;
  const Tensor out_b = b.forward(query.view(), key.view(), value.view()).out;
  return testing::bitwise_equal(out_a, out_b);
}

bool same_state(const MultiHeadAttention& a, const MultiHeadAttention& b) {
  const auto sa = a.state_dict(), sb = b.state_dict();
  if (names_of(sa) != names_of(sb)) return false;
  for (const auto& [name, t] : sa)
    if (!testing::bitwise_equal(t, sb.at(name))) return false;
  return true;
}

TEST(MultiHeadAttentionStateDict, LoadAcceptsThePackedAndTheSplitForm) {
  ATTNKIT_TRACE_SEED();
  Rng rng(9);
  const MultiHeadAttentionConfig config{.embed_dim = 8, .num_heads = 2};
  MultiHeadAttention source(config, 1);
  randomize(source, rng);
  const Dims dm = dims_of(config);
  const Params p = params_from_state(source.state_dict(), dm);

  // Packed, as state_dict() wrote it.
  MultiHeadAttention packed(config, 2);
  packed.load_state_dict(source.state_dict());
  EXPECT_TRUE(same_state(source, packed));
  EXPECT_TRUE(same_outputs(source, packed, rng));

  // Split: q/k/v_proj_weight [E, E] (as torch writes them when kdim, vdim ≠ E, here with E's widths).
  std::map<std::string, Tensor> split;
  split.emplace("q_proj_weight", tensor_of(p.wq, {8, 8}));
  split.emplace("k_proj_weight", tensor_of(p.wk, {8, 8}));
  split.emplace("v_proj_weight", tensor_of(p.wv, {8, 8}));
  for (const std::string name : {"in_proj_bias", "out_proj.weight", "out_proj.bias"})
    split.emplace(name, source.parameter(name));
  MultiHeadAttention from_split(config, 3);
  from_split.load_state_dict(split);
  EXPECT_TRUE(same_state(source, from_split)) << "the split form is packed into in_proj_weight";
  EXPECT_TRUE(same_outputs(source, from_split, rng));

  // A float64 state dict is converted to the weight dtype.
  MultiHeadAttention from_f64(config, 4);
  from_f64.load_state_dict(state_tensors(p, dm, DType::f64));
  EXPECT_TRUE(same_state(source, from_f64));
}

TEST(MultiHeadAttentionStateDict, BadStatesRaiseNamingTheParameterAndLeaveTheModuleUnchanged) {
  ATTNKIT_TRACE_SEED();
  Rng rng(10);
  const MultiHeadAttentionConfig packed_config{.embed_dim = 8, .num_heads = 2};
  const MultiHeadAttentionConfig cross{.embed_dim = 8, .num_heads = 2, .kdim = 5, .vdim = 3};
  MultiHeadAttention module(packed_config, 1);
  randomize(module, rng);
  const MultiHeadAttention before = module;
  const std::map<std::string, Tensor> good = module.state_dict();
  const auto with = [&](const std::string& name, Tensor t) {
    std::map<std::string, Tensor> s = good;
    s[name] = std::move(t);
    return s;
  };
  const auto without = [&](const std::string& name) {
    std::map<std::string, Tensor> s = good;
    s.erase(name);
    return s;
  };
  const auto load = [&](const std::map<std::string, Tensor>& s) { return [&module, s] { module.load_state_dict(s); }; };

  expect_error(load(without("out_proj.bias")), ErrorCode::invalid_argument, "out_proj.bias", "missing");
  expect_error(load(without("in_proj_weight")), ErrorCode::invalid_argument, "in_proj_weight", "missing");
  expect_error(load(with("bias_k", Tensor(DType::f32, {1, 1, 8}))), ErrorCode::invalid_argument, "bias_k",
               "unexpected");
  expect_error(load(with("bias_v", Tensor(DType::f32, {1, 1, 8}))), ErrorCode::invalid_argument, "bias_v",
               "unexpected");
  expect_error(load(with("out_proj.weights", Tensor(DType::f32, {8, 8}))), ErrorCode::invalid_argument,
               "out_proj.weights", "unexpected");
  expect_error(load(with("in_proj_weight", Tensor(DType::f32, {24, 9}))), ErrorCode::invalid_shape, "in_proj_weight",
               "wrong shape");
  expect_error(load(with("in_proj_weight", Tensor(DType::f32, {24, 8, 1}))), ErrorCode::invalid_shape, "in_proj_weight",
               "wrong rank");
  expect_error(load(with("out_proj.bias", Tensor(DType::f32, {7}))), ErrorCode::invalid_shape, "[7]",
               "wrong shape, shown");
  expect_error(load(with("in_proj_bias", Tensor(DType::i32, {24}))), ErrorCode::invalid_dtype, "in_proj_bias",
               "int dtype");
  expect_error(load(with("out_proj.weight", Tensor(DType::boolean, {8, 8}))), ErrorCode::invalid_dtype,
               "out_proj.weight", "bool dtype");
  {  // A split form missing one projection.
    std::map<std::string, Tensor> s = without("in_proj_weight");
    s.emplace("q_proj_weight", Tensor(DType::f32, {8, 8}));
    s.emplace("k_proj_weight", Tensor(DType::f32, {8, 8}));
    expect_error(load(s), ErrorCode::invalid_argument, "in_proj_weight", "split form without v_proj_weight");
    s.emplace("v_proj_weight", Tensor(DType::f32, {8, 5}));
    expect_error(load(s), ErrorCode::invalid_shape, "v_proj_weight", "split form, wrong shape");
  }
  EXPECT_TRUE(same_state(before, module)) << "a failed load must leave the parameters as they were";

  // The cross-attention configuration needs the split form: in_proj_weight cannot fit it.
  MultiHeadAttention cross_module(cross, 1);
  const MultiHeadAttention cross_before = cross_module;
  std::map<std::string, Tensor> packed_state = MultiHeadAttention(packed_config, 2).state_dict();
  expect_error([&] { cross_module.load_state_dict(packed_state); }, ErrorCode::invalid_shape, "in_proj_weight",
               "packed state into a cross-attention module");
  std::map<std::string, Tensor> cross_state = cross_module.state_dict();
  cross_state["k_proj_weight"] = Tensor(DType::f32, {8, 8});
  expect_error([&] { cross_module.load_state_dict(cross_state); }, ErrorCode::invalid_shape, "k_proj_weight",
               "kdim mismatch");
  EXPECT_TRUE(same_state(cross_before, cross_module));
}


TEST(MultiHeadAttentionFiles, SaveThenLoadReproducesTheOutputBitwise) {
  ATTNKIT_TRACE_SEED();
  Rng rng(11);
  const ScratchDir dir("attnkit_mha");
  for (const MultiHeadAttentionConfig& config :
       {MultiHeadAttentionConfig{.embed_dim = 8, .num_heads = 2},
        MultiHeadAttentionConfig{
            .embed_dim = 12, .num_heads = 4, .num_kv_heads = 2, .kdim = 5, .vdim = 7, .bias = false},
        MultiHeadAttentionConfig{.embed_dim = 8, .num_heads = 2, .batch_first = false, .weight_dtype = DType::bf16}}) {
    MultiHeadAttention saved(config, 1);
    randomize(saved, rng);
    const std::string path = dir.file("module.safetensors");
    saved.save(path);
    const SafetensorsFile file = read_safetensors(path);
    EXPECT_EQ(file.metadata.count("format"), 1u);
    if (file.metadata.count("format") != 0) {
      EXPECT_EQ(file.metadata.at("format"), "pt");
    }
    EXPECT_EQ(names_of(file.tensors), names_of(saved.state_dict()));
    for (const auto& [name, t] : file.tensors) EXPECT_EQ(t.dtype(), config.weight_dtype) << name;
    MultiHeadAttention loaded(config, 2);
    loaded.load(path);
    EXPECT_TRUE(same_state(saved, loaded));
    EXPECT_TRUE(same_outputs(saved, loaded, rng));
  }
}

TEST(MultiHeadAttentionFiles, LoadsADirectoryOfNpyFiles) {
  ATTNKIT_TRACE_SEED();
  Rng rng(12);
  const MultiHeadAttentionConfig config{.embed_dim = 8, .num_heads = 2};
  MultiHeadAttention saved(config, 1);
  randomize(saved, rng);
  {  // The packed form, one <name>.npy per parameter (out_proj.weight.npy, ...); other files are ignored.
    const ScratchDir dir("attnkit_mha");
    for (const auto& [name, t] : saved.state_dict()) write_npy(dir.file(name + ".npy"), t);
    std::ofstream(dir.file("README.txt")) << "not a tensor";
    MultiHeadAttention loaded(config, 2);
    loaded.load(dir.path());
    EXPECT_TRUE(same_state(saved, loaded));
    EXPECT_TRUE(same_outputs(saved, loaded, rng));
  }
  {  // The split form, in float64.
    const ScratchDir dir("attnkit_mha");
    const Params p = params_from_state(saved.state_dict(), dims_of(config));
    write_npy(dir.file("q_proj_weight.npy"), tensor_of(p.wq, {8, 8}, DType::f64));
    write_npy(dir.file("k_proj_weight.npy"), tensor_of(p.wk, {8, 8}, DType::f64));
    write_npy(dir.file("v_proj_weight.npy"), tensor_of(p.wv, {8, 8}, DType::f64));
    for (const std::string name : {"in_proj_bias", "out_proj.weight", "out_proj.bias"}) {
      write_npy(dir.file(name + ".npy"), Tensor::converted(saved.parameter(name).view(), DType::f64));
    }
    MultiHeadAttention loaded(config, 2);
    loaded.load(dir.path());
    EXPECT_TRUE(same_state(saved, loaded));
  }
  {  // A directory missing a parameter, and a path that does not exist.
    const ScratchDir dir("attnkit_mha");
    for (const auto& [name, t] : saved.state_dict())
      if (name != "out_proj.bias") write_npy(dir.file(name + ".npy"), t);
    MultiHeadAttention loaded(config, 2);
    expect_error([&] { loaded.load(dir.path()); }, ErrorCode::invalid_argument, "out_proj.bias");
    expect_error([&] { loaded.load(dir.file("missing.safetensors")); }, ErrorCode::io_error, "missing.safetensors");
  }
}

// Known weights, as a function of the parameter and the index, float32-exact.
double known_value(const std::string& name, int64_t index) {
  const double phase = static_cast<double>(name.size()) + 0.1 * static_cast<double>(name[0]);
  return round_to(DType::f32, 0.45 * std::sin(0.37 * static_cast<double>(index) + phase));
}

// A .safetensors file as torch users write it (safetensors.torch.save_file(module.state_dict())):
// torch's names in its order, float32, "__metadata__" {"format": "pt"}. Loaded unchanged, it gives
// the float64 composition's output on the same weights.
TEST(MultiHeadAttentionFiles, TorchLayoutSafetensorsFixtureGivesTheKnownOutput) {
  const ScratchDir dir("attnkit_mha");
  const std::vector<std::tuple<std::string, MultiHeadAttentionConfig, bool>> cases = {
      {"packed", {.embed_dim = 6, .num_heads = 2, .batch_first = false}, true},
      {"split", {.embed_dim = 4, .num_heads = 2, .kdim = 5, .vdim = 3, .bias = false}, false},
  };
  for (const auto& [label, config, self] : cases) {
    SCOPED_TRACE(label);
    const Dims dm = dims_of(config);
    std::map<std::string, Tensor> weights;
    std::vector<std::pair<std::string, ConstTensorView>> entries;
    for (const auto& [name, shape] : torch_parameters(dm)) {
      Tensor t(DType::f32, shape);
      for (int64_t e = 0; e < t.numel(); ++e) t.data<float>()[e] = static_cast<float>(known_value(name, e));
      weights.emplace(name, std::move(t));
    }
    for (const auto& [name, shape] : torch_parameters(dm)) entries.emplace_back(name, weights.at(name).view());
    const std::string path = dir.file(label + ".safetensors");
    write_safetensors(path, entries, {{"format", "pt"}});

    MultiHeadAttention module(config, 5);
    module.load(path);
    Sequences x;
    x.B = 2;
    x.n = 3;
    x.m = self ? 3 : 4;
    const auto known_inputs = [](int64_t count, double phase) {
      Vec v(at(count));
      for (int64_t i = 0; i < count; ++i)
        v[at(i)] = round_to(DType::f32, std::cos(0.91 * static_cast<double>(i) + phase));
      return v;
    };
    x.xq = known_inputs(x.B * x.n * dm.E, 0.0);
    x.xk = self ? x.xq : known_inputs(x.B * x.m * dm.kdim, 1.0);
    x.xv = self ? x.xq : known_inputs(x.B * x.m * dm.vdim, 2.0);
    const InputLayout layout = layout_of(config, false);
    const Tensor query = to_caller(x.xq, x.B, x.n, dm.E, layout, DType::f32);
    const Tensor key = to_caller(x.xk, x.B, x.m, dm.kdim, layout, DType::f32);
    const Tensor value = to_caller(x.xv, x.B, x.m, dm.vdim, layout, DType::f32);
    const Tensor out = module.forward(query.view(), key.view(), value.view()).out;
    const Vec known = composition_forward(dm, params_from_state(weights, dm), x, {}, false).y;
    expect_close("out", from_caller(out, x.B, x.n, dm.E, layout), known);
  }
}

// ---- torch itself, when it is installed ----

bool torch_available() { return std::system("python3 -c 'import torch' > /dev/null 2>&1") == 0; }

// Reads and writes .npy by hand (no numpy needed), runs torch.nn.MultiheadAttention in float64 on the
// files the test wrote and writes its output, weights and gradients back.
constexpr const char* kTorchScript = R"PY(
import ast, os, struct, sys
import torch

DIR = sys.argv[1]

def read_npy(name):
    with open(os.path.join(DIR, name + '.npy'), 'rb') as f:
        data = f.read()
    assert data[:6] == b'\x93NUMPY', name
    if data[6] == 1:
        (length,) = struct.unpack('<H', data[8:10]); start = 10
    else:
        (length,) = struct.unpack('<I', data[8:12]); start = 12
    header = ast.literal_eval(data[start:start + length].decode('latin1'))
    dtype = {'<f4': torch.float32, '<f8': torch.float64, '|b1': torch.bool}[header['descr']]
    shape = tuple(header['shape'])
    body = bytearray(data[start + length:])
    flat = torch.frombuffer(body, dtype=dtype) if len(body) else torch.zeros(0, dtype=dtype)
    return flat.reshape(shape).clone()

def write_npy(name, t):
    t = t.detach().to(torch.float64).contiguous()
    header = "{'descr': '<f8', 'fortran_order': False, 'shape': %r, }" % (tuple(t.shape),)
    header += ' ' * ((64 - (10 + len(header) + 1) % 64) % 64) + '\n'
    values = t.reshape(-1).tolist()
    with open(os.path.join(DIR, name + '.npy'), 'wb') as f:
        f.write(b'\x93NUMPY\x01\x00' + struct.pack('<H', len(header)) + header.encode('latin1'))
        f.write(struct.pack('<%dd' % len(values), *values))

cfg = ast.literal_eval(open(os.path.join(DIR, 'config.txt')).read())
mha = torch.nn.MultiheadAttention(cfg['embed_dim'], cfg['num_heads'], bias=cfg['bias'], kdim=cfg['kdim'],
                                  vdim=cfg['vdim'], batch_first=cfg['batch_first']).to(torch.float64)
mha.load_state_dict({name: read_npy('param_' + name).to(torch.float64) for name in cfg['parameters']})
inputs = [read_npy(name).to(torch.float64).requires_grad_() for name in ('query', 'key', 'value')]
masks = {}
for name in ('key_padding_mask', 'attn_mask'):
    if cfg[name]:
        mask = read_npy(name)
        masks[name] = mask if mask.dtype == torch.bool else mask.to(torch.float64)
out, weights = mha(*inputs, need_weights=True, average_attn_weights=cfg['average_attn_weights'], **masks)
(out * read_npy('d_out').to(torch.float64)).sum().backward()
write_npy('torch_out', out)
write_npy('torch_weights', weights)
for name, t in zip(('query', 'key', 'value'), inputs):
    write_npy('torch_d_' + name, t.grad)
for name, parameter in mha.named_parameters():
    write_npy('torch_d_' + name, parameter.grad)
)PY";

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(MultiHeadAttentionTorch, MatchesTorchNnMultiheadAttention) {
  if (!torch_available()) {
    GTEST_SKIP() << "torch is not installed: `python3 -c \"import torch\"` failed, so the direct comparison with "
                    "torch.nn.MultiheadAttention cannot run (the torch-layout fixture test still checks the layout "
                    "against the float64 composition)";
  }
  ATTNKIT_TRACE_SEED();
  Rng rng(13);
  const std::vector<MhaCase> cases = {
      {.name = "packed_batch_first_bool_masks",
       .config = {.embed_dim = 8, .num_heads = 2},
       .batch = 2,
       .n = 5,
       .m = 6,
       .padding = PaddingMask::boolean,
       .attn = AttnMask::bool_3d},
      {.name = "split_seq_first_float_masks_per_head",
       .config = {.embed_dim = 6, .num_heads = 3, .kdim = 5, .vdim = 7, .bias = false, .batch_first = false},
       .batch = 3,
       .n = 4,
       .m = 7,
       .padding = PaddingMask::additive,
       .attn = AttnMask::float_2d,
       .set = [](MultiHeadAttentionOptions& o) { o.average_attn_weights = false; }},
      {.name = "unbatched_self",
       .config = {.embed_dim = 8, .num_heads = 4},
       .batch = 1,
       .n = 5,
       .self = true,
       .unbatched = true,
       .padding = PaddingMask::boolean},
  };
  for (const MhaCase& c : cases) {
    SCOPED_TRACE(c.name);
    const ScratchDir dir("attnkit_mha");
    MultiHeadAttention module(c.config, 1);
    randomize(module, rng);
    const Dims dm = dims_of(c.config);
    const Sequences x = random_sequences(rng, c, dm, DType::f32);
    const InputLayout layout = layout_of(c.config, c.unbatched);
    const Tensor query = to_caller(x.xq, x.B, x.n, dm.E, layout, DType::f32);
    const Tensor key = to_caller(x.xk, x.B, x.m, dm.kdim, layout, DType::f32);
    const Tensor value = to_caller(x.xv, x.B, x.m, dm.vdim, layout, DType::f32);
    const Tensor d_out =
        to_caller(random_values(rng, x.B * x.n * dm.E, 1.0, DType::f32), x.B, x.n, dm.E, layout, DType::f32);
    MultiHeadAttentionOptions o;
    o.need_weights = true;
    c.set(o);
    const TorchMasks masks = make_masks(rng, c.padding, c.attn, x.B, dm.H, x.n, x.m, c.unbatched, o, true);

    std::ostringstream config;
    config << "{'embed_dim': " << dm.E << ", 'num_heads': " << dm.H << ", 'kdim': " << dm.kdim
           << ", 'vdim': " << dm.vdim << ", 'bias': " << (dm.bias ? "True" : "False")
           << ", 'batch_first': " << (c.config.batch_first ? "True" : "False")
           << ", 'average_attn_weights': " << (o.average_attn_weights ? "True" : "False")
           << ", 'key_padding_mask': " << (o.key_padding_mask ? "True" : "False")
           << ", 'attn_mask': " << (o.attn_mask ? "True" : "False") << ", 'parameters': [";
    for (const std::string& name : module.parameter_names()) {
      config << "'" << name << "', ";
      write_npy(dir.file("param_" + name + ".npy"), module.parameter(name));
    }
    config << "]}";
    std::ofstream(dir.file("config.txt")) << config.str();
    std::ofstream(dir.file("mha.py")) << kTorchScript;
    write_npy(dir.file("query.npy"), query);
    write_npy(dir.file("key.npy"), key);
    write_npy(dir.file("value.npy"), value);
    write_npy(dir.file("d_out.npy"), d_out);
    if (o.key_padding_mask) write_npy(dir.file("key_padding_mask.npy"), masks.key_padding);
    if (o.attn_mask) write_npy(dir.file("attn_mask.npy"), masks.attn);
    const std::string command =
        "python3 " + dir.file("mha.py") + " " + dir.path() + " > " + dir.file("log.txt") + " 2>&1";
    ASSERT_EQ(std::system(command.c_str()), 0) << read_text(dir.file("log.txt"));

    MultiHeadAttentionContext context;
    const MultiHeadAttentionOutput out = module.forward(query.view(), key.view(), value.view(), o, &context);
    const MultiHeadAttentionGradients g = module.backward(context, d_out.view());
    const auto torch_result = [&](const std::string& name) {
      return testing::values(read_npy(dir.file("torch_" + name + ".npy")));
    };
    expect_close("out", testing::values(out.out), torch_result("out"));
    ASSERT_TRUE(out.weights.has_value());
    expect_close("weights", testing::values(*out.weights), torch_result("weights"));
    expect_close("d_query", testing::values(g.d_query), torch_result("d_query"));
    expect_close("d_key", testing::values(g.d_key), torch_result("d_key"));
    expect_close("d_value", testing::values(g.d_value), torch_result("d_value"));
    for (const auto& [name, grad] : g.d_weights)
      expect_close("d_weights[" + name + "]", testing::values(grad), torch_result("d_" + name));
  }
}

// ---- 5. bad input and empty sizes ----

class MultiHeadAttentionBadInput : public ::testing::Test {
 protected:
  // E = 8, kdim = 6, vdim = 5: every width differs, so a message can only be right by naming the right input.
  MultiHeadAttention module_{MultiHeadAttentionConfig{.embed_dim = 8, .num_heads = 2, .kdim = 6, .vdim = 5}, 1};
  Tensor query_{DType::f32, {2, 3, 8}}, key_{DType::f32, {2, 4, 6}}, value_{DType::f32, {2, 4, 5}};

  void expect_forward_error(ConstTensorView q, ConstTensorView k, ConstTensorView v, ErrorCode code,
                            const std::string& named, const MultiHeadAttentionOptions& o = {}) {
    expect_error([&] { (void)module_.forward(q, k, v, o); }, code, named, "forward naming " + named);
  }
};

TEST_F(MultiHeadAttentionBadInput, QueryKeyValueShapesAndDtypes) {
  const Tensor rank1(DType::f32, {8}), rank4(DType::f32, {1, 2, 3, 8});
  expect_forward_error(rank1.view(), key_.view(), value_.view(), ErrorCode::invalid_shape, "query");
  expect_forward_error(rank4.view(), key_.view(), value_.view(), ErrorCode::invalid_shape, "query");
  expect_forward_error(query_.view(), rank4.view(), value_.view(), ErrorCode::invalid_shape, "key");
  expect_forward_error(query_.view(), key_.view(), Tensor(DType::f32, {5}).view(), ErrorCode::invalid_shape, "value");
  // Widths.
  expect_forward_error(Tensor(DType::f32, {2, 3, 7}).view(), key_.view(), value_.view(), ErrorCode::invalid_shape,
                       "query");
  expect_forward_error(query_.view(), Tensor(DType::f32, {2, 4, 8}).view(), value_.view(), ErrorCode::invalid_shape,
                       "key");
  expect_forward_error(query_.view(), key_.view(), Tensor(DType::f32, {2, 4, 6}).view(), ErrorCode::invalid_shape,
                       "value");
  // Batches and lengths.
  expect_forward_error(query_.view(), Tensor(DType::f32, {3, 4, 6}).view(), value_.view(), ErrorCode::invalid_shape,
                       "key");
  expect_forward_error(query_.view(), key_.view(), Tensor(DType::f32, {1, 4, 5}).view(), ErrorCode::invalid_shape,
                       "value");
  expect_forward_error(query_.view(), key_.view(), Tensor(DType::f32, {2, 5, 5}).view(), ErrorCode::invalid_shape,
                       "value");
  // Batched and unbatched mixed.
  expect_forward_error(Tensor(DType::f32, {3, 8}).view(), key_.view(), value_.view(), ErrorCode::invalid_shape, "key");
  expect_forward_error(query_.view(), Tensor(DType::f32, {4, 6}).view(), Tensor(DType::f32, {4, 5}).view(),
                       ErrorCode::invalid_shape, "key");
  // Dtypes.
  expect_forward_error(Tensor(DType::i32, {2, 3, 8}).view(), key_.view(), value_.view(), ErrorCode::invalid_dtype,
                       "query");
  expect_forward_error(query_.view(), Tensor(DType::boolean, {2, 4, 6}).view(), value_.view(), ErrorCode::invalid_dtype,
                       "key");
  expect_forward_error(query_.view(), key_.view(), Tensor(DType::i64, {2, 4, 5}).view(), ErrorCode::invalid_dtype,
                       "value");
}

TEST_F(MultiHeadAttentionBadInput, Masks) {
  const auto with_padding = [](const Tensor& t) {
    MultiHeadAttentionOptions o;
    o.key_padding_mask = t.view();
    return o;
  };
  const auto with_attn = [](const Tensor& t) {
    MultiHeadAttentionOptions o;
    o.attn_mask = t.view();
    return o;
  };
  // key_padding_mask must be [B, m] = [2, 4].
  for (const std::vector<int64_t>& shape :
       std::vector<std::vector<int64_t>>{{2, 5}, {3, 4}, {4, 2}, {4}, {2, 1, 4}, {2, 3}}) {
    const Tensor mask(DType::boolean, shape);
    expect_forward_error(query_.view(), key_.view(), value_.view(), ErrorCode::invalid_shape, "key_padding_mask",
                         with_padding(mask));
  }
  expect_forward_error(query_.view(), key_.view(), value_.view(), ErrorCode::invalid_dtype, "key_padding_mask",
                       with_padding(Tensor(DType::i32, {2, 4})));
  // attn_mask must be [n, m] = [3, 4] or [B·H, n, m] = [4, 3, 4].
  for (const std::vector<int64_t>& shape :
       std::vector<std::vector<int64_t>>{{3, 5}, {4, 4}, {4, 3}, {3, 3, 4}, {2, 3, 4}, {4, 3, 5}, {2, 2, 3, 4}, {12}}) {
    const Tensor mask(DType::f32, shape);
    expect_forward_error(query_.view(), key_.view(), value_.view(), ErrorCode::invalid_shape, "attn_mask",
                         with_attn(mask));
  }
  expect_forward_error(query_.view(), key_.view(), value_.view(), ErrorCode::invalid_dtype, "attn_mask",
                       with_attn(Tensor(DType::i64, {3, 4})));
  // Unbatched: key_padding_mask is [m], attn_mask [n, m] or [H, n, m].
  const Tensor q(DType::f32, {3, 8}), k(DType::f32, {4, 6}), v(DType::f32, {4, 5});
  expect_forward_error(q.view(), k.view(), v.view(), ErrorCode::invalid_shape, "key_padding_mask",
                       with_padding(Tensor(DType::boolean, {1, 4})));
  expect_forward_error(q.view(), k.view(), v.view(), ErrorCode::invalid_shape, "attn_mask",
                       with_attn(Tensor(DType::boolean, {3, 3, 4})));
  // Good masks are accepted (the shapes above fail for their shape alone).
  MultiHeadAttentionOptions good;
  const Tensor padding(DType::boolean, {2, 4}), attn(DType::f32, {4, 3, 4});
  good.key_padding_mask = padding.view();
  good.attn_mask = attn.view();
  EXPECT_NO_THROW((void)module_.forward(query_.view(), key_.view(), value_.view(), good));
}

TEST_F(MultiHeadAttentionBadInput, CallOptions) {
  MultiHeadAttentionOptions o;
  o.dropout_p = 1.0;
  expect_forward_error(query_.view(), key_.view(), value_.view(), ErrorCode::invalid_argument, "dropout_p", o);
  o.dropout_p = -0.1;
  expect_forward_error(query_.view(), key_.view(), value_.view(), ErrorCode::invalid_argument, "dropout_p", o);
  o = {};
  o.window = {-2, 0};
  expect_forward_error(query_.view(), key_.view(), value_.view(), ErrorCode::invalid_argument, "window", o);
}

TEST(MultiHeadAttentionBadConfig, RaisesNamingTheField) {
  using C = MultiHeadAttentionConfig;
  const auto make = [](const C& c) { return [c] { const MultiHeadAttention module(c); }; };
  expect_error(make({.embed_dim = 10, .num_heads = 3}), ErrorCode::invalid_argument, "num_heads", "not dividing");
  expect_error(make({.embed_dim = 12, .num_heads = 4, .num_kv_heads = 3}), ErrorCode::invalid_argument, "num_kv_heads");
  expect_error(make({.embed_dim = 6, .num_heads = 2, .rope = RopeConfig{}}), ErrorCode::invalid_argument, "head_dim",
               "odd head_dim (6 / 2) with RoPE");
  expect_error(make({.embed_dim = 9, .num_heads = 3, .rope = RopeConfig{}}), ErrorCode::invalid_argument, "head_dim",
               "odd head_dim with RoPE");
  expect_error(make({.embed_dim = 8, .num_heads = 2, .head_dim = 5, .rope = RopeConfig{}}), ErrorCode::invalid_argument,
               "head_dim", "odd explicit head_dim with RoPE");
  expect_error(make({.embed_dim = 8, .num_heads = 2, .rope = RopeConfig{0.0}}), ErrorCode::invalid_argument, "base");
  expect_error(make({.embed_dim = 8, .num_heads = 2, .rope = RopeConfig{kInf}}), ErrorCode::invalid_argument, "base");
  expect_error(make({.embed_dim = 8, .num_heads = 2, .weight_dtype = DType::f16}), ErrorCode::invalid_dtype,
               "weight_dtype");
  expect_error(make({.embed_dim = 8, .num_heads = 2, .weight_dtype = DType::f64}), ErrorCode::invalid_dtype,
               "weight_dtype");
  expect_error(make({.embed_dim = 0, .num_heads = 2}), ErrorCode::invalid_argument, "embed_dim");
  expect_error(make({.embed_dim = 8, .num_heads = 0}), ErrorCode::invalid_argument, "num_heads");
  expect_error(make({.embed_dim = 8, .num_heads = -2}), ErrorCode::invalid_argument, "num_heads");
  expect_error(make({.embed_dim = 8, .num_heads = 2, .num_kv_heads = -1}), ErrorCode::invalid_argument, "num_kv_heads");
  expect_error(make({.embed_dim = 8, .num_heads = 2, .head_dim = -4}), ErrorCode::invalid_argument, "head_dim");
  expect_error(make({.embed_dim = 8, .num_heads = 2, .kdim = -1}), ErrorCode::invalid_argument, "kdim");
  expect_error(make({.embed_dim = 8, .num_heads = 2, .vdim = -3}), ErrorCode::invalid_argument, "vdim");
  // head_dim set explicitly lifts the divisibility requirement.
  EXPECT_NO_THROW(make({.embed_dim = 10, .num_heads = 3, .head_dim = 4})());
}

TEST_F(MultiHeadAttentionBadInput, DOutOfTheWrongShapeOrAnEmptyContext) {
  MultiHeadAttentionContext context;
  (void)module_.forward(query_.view(), key_.view(), value_.view(), {}, &context);
  const auto backward_with = [&](std::vector<int64_t> shape, DType dtype = DType::f32) {
    return [this, &context, shape, dtype] { (void)module_.backward(context, Tensor(dtype, shape).view()); };
  };
  for (const std::vector<int64_t>& shape :
       std::vector<std::vector<int64_t>>{{2, 3, 7}, {2, 4, 8}, {3, 3, 8}, {1, 3, 8}, {3, 8}, {8}, {1, 2, 3, 8}}) {
    expect_error(backward_with(shape), ErrorCode::invalid_shape, "d_out",
                 "d_out of shape " + std::to_string(shape.size()));
  }
  expect_error(backward_with({2, 3, 8}, DType::i32), ErrorCode::invalid_dtype, "d_out");
  EXPECT_NO_THROW(backward_with({2, 3, 8})());
  const MultiHeadAttentionContext empty;
  expect_error(
      [&] {
        (void)module_.backward(empty, Tensor(DType::f32, {2, 3, 8}).view());
      },
      ErrorCode::invalid_argument, "context");
}

// d_out must have the forward output's shape: a batched forward of one sequence ([1, n, E]) does not
// take an unbatched d_out ([n, E]), nor the reverse; accepting it would return d_query of another
// shape than query (and, with an unbatched key_padding_mask, fail on the mask instead).
TEST(MultiHeadAttentionBadDOut, RankMustMatchTheForwardOutput) {
  const MultiHeadAttention module({.embed_dim = 8, .num_heads = 2}, 1);
  const Tensor batched(DType::f32, {1, 3, 8}), unbatched(DType::f32, {3, 8});
  MultiHeadAttentionContext context_batched, context_unbatched;
  (void)module.forward(batched.view(), batched.view(), batched.view(), {}, &context_batched);
  (void)module.forward(unbatched.view(), unbatched.view(), unbatched.view(), {}, &context_unbatched);
  expect_error([&] { (void)module.backward(context_batched, unbatched.view()); }, ErrorCode::invalid_shape, "d_out",
               "unbatched d_out for a batched forward");
  expect_error([&] { (void)module.backward(context_unbatched, batched.view()); }, ErrorCode::invalid_shape, "d_out",
               "batched d_out for an unbatched forward");
}

// Zero queries, zero keys or zero sequences: results of the right shapes, all zero (without biases the
// output of a query that sees no key is exactly zero, and so is every gradient when n, m or B is 0).
TEST(MultiHeadAttentionEmpty, ZeroSizesGiveShapedZeroResults) {
  ATTNKIT_TRACE_SEED();
  Rng rng(14);
  for (const bool batch_first : {true, false}) {
    MultiHeadAttention module(
        {.embed_dim = 6, .num_heads = 2, .kdim = 5, .vdim = 4, .bias = false, .batch_first = batch_first}, 1);
    randomize(module, rng);
    const InputLayout layout = batch_first ? InputLayout::batch_first : InputLayout::seq_first;
    for (const auto& [B, n, m] :
         std::vector<std::tuple<int64_t, int64_t, int64_t>>{{2, 0, 4}, {2, 3, 0}, {0, 3, 4}, {0, 0, 0}}) {
      SCOPED_TRACE("B=" + std::to_string(B) + " n=" + std::to_string(n) + " m=" + std::to_string(m) +
                   (batch_first ? " batch_first" : " seq_first"));
      const Tensor query = to_caller(random_values(rng, B * n * 6, 1.0), B, n, 6, layout, DType::f32);
      const Tensor key = to_caller(random_values(rng, B * m * 5, 1.0), B, m, 5, layout, DType::f32);
      const Tensor value = to_caller(random_values(rng, B * m * 4, 1.0), B, m, 4, layout, DType::f32);
      const Tensor padding(DType::boolean, {B, m});
      MultiHeadAttentionOptions o;
      o.key_padding_mask = padding.view();
      o.need_weights = true;
      o.average_attn_weights = false;
      MultiHeadAttentionContext context;
      const MultiHeadAttentionOutput out = module.forward(query.view(), key.view(), value.view(), o, &context);
      EXPECT_EQ(out.out.shape(), caller_shape(B, n, 6, layout));
      ASSERT_TRUE(out.weights.has_value());
      EXPECT_EQ(out.weights->shape(), (std::vector<int64_t>{B, 2, n, m}));
      for (double v : testing::values(out.out)) EXPECT_EQ(v, 0.0);
      const Tensor d_out = to_caller(random_values(rng, B * n * 6, 1.0), B, n, 6, layout, DType::f32);
      const MultiHeadAttentionGradients g = module.backward(context, d_out.view());
      EXPECT_EQ(g.d_query.shape(), caller_shape(B, n, 6, layout));
      EXPECT_EQ(g.d_key.shape(), caller_shape(B, m, 5, layout));
      EXPECT_EQ(g.d_value.shape(), caller_shape(B, m, 4, layout));
      for (const Tensor* t : {&g.d_query, &g.d_key, &g.d_value})
        for (double v : testing::values(*t)) EXPECT_EQ(v, 0.0);
      EXPECT_EQ(g.d_weights.size(), module.parameter_names().size());
      for (const auto& [name, t] : g.d_weights) {
        EXPECT_EQ(t.shape(), module.parameter(name).shape()) << name;
        for (double v : testing::values(t)) EXPECT_EQ(v, 0.0) << name;
      }
    }
  }
  {  // Unbatched, no queries and no keys.
    MultiHeadAttention module({.embed_dim = 6, .num_heads = 2}, 1);
    const Tensor none(DType::f32, {0, 6});
    MultiHeadAttentionContext context;
    const MultiHeadAttentionOutput out = module.forward(none.view(), none.view(), none.view(), {}, &context);
    EXPECT_EQ(out.out.shape(), (std::vector<int64_t>{0, 6}));
    const MultiHeadAttentionGradients g = module.backward(context, none.view());
    EXPECT_EQ(g.d_query.shape(), (std::vector<int64_t>{0, 6}));
    EXPECT_EQ(g.d_key.shape(), (std::vector<int64_t>{0, 6}));
  }
}

// ---- 6. determinism ----

// Sizes past the module's blocks (64 rows, 64 features per BLAS call) and the kernels' tiles, every
// option on: the forward and backward must not depend on how many threads share the work.
TEST(MultiHeadAttentionThreadCount, ForwardAndBackwardAreBitwiseIdenticalForAnyThreadCount) {
  ATTNKIT_TRACE_SEED();
  Rng rng(15);
  const MultiHeadAttentionConfig config{.embed_dim = 72,
                                        .num_heads = 4,
                                        .num_kv_heads = 2,
                                        .kdim = 40,
                                        .vdim = 36,
                                        .batch_first = false,
                                        .rope = RopeConfig{}};
  MultiHeadAttention module(config, 1);
  randomize(module, rng);
  const int64_t B = 2, n = 67, m = 70;
  const Tensor query = testing::random_tensor(rng, {n, B, 72}, DType::f32);
  const Tensor key = testing::random_tensor(rng, {m, B, 40}, DType::f32);
  const Tensor value = testing::random_tensor(rng, {m, B, 36}, DType::f32);
  const Tensor d_out = testing::random_tensor(rng, {n, B, 72}, DType::f32);
  MultiHeadAttentionOptions o;
  const TorchMasks masks = make_masks(rng, PaddingMask::additive, AttnMask::bool_3d, B, 4, n, m, false, o);
  o.causal = Causal::bottom_right;
  o.window = {40, -1};
  o.dropout_p = 0.1;
  o.seed = 17;
  o.need_weights = true;
  o.average_attn_weights = false;
  o.query_position = 6;
  o.key_position = 3;

  struct Run {
    MultiHeadAttentionOutput out;
    MultiHeadAttentionGradients grads;
  };
  const auto run = [&](int threads) {
    set_num_threads(threads);
    MultiHeadAttentionContext context;
    Run r;
    r.out = module.forward(query.view(), key.view(), value.view(), o, &context);
    r.grads = module.backward(context, d_out.view());
    return r;
  };
  const Run one = run(1);
  for (int threads : {2, 3}) {
    const Run many = run(threads);
    EXPECT_TRUE(testing::bitwise_equal(one.out.out, many.out.out)) << threads << " threads: out";
    EXPECT_TRUE(testing::bitwise_equal(*one.out.weights, *many.out.weights)) << threads << " threads: weights";
    EXPECT_TRUE(testing::bitwise_equal(one.grads.d_query, many.grads.d_query)) << threads << " threads: d_query";
    EXPECT_TRUE(testing::bitwise_equal(one.grads.d_key, many.grads.d_key)) << threads << " threads: d_key";
    EXPECT_TRUE(testing::bitwise_equal(one.grads.d_value, many.grads.d_value)) << threads << " threads: d_value";
    for (const auto& [name, t] : one.grads.d_weights) {
      EXPECT_TRUE(testing::bitwise_equal(t, many.grads.d_weights.at(name))) << threads << " threads: " << name;
    }
  }
  set_num_threads(0);
}

// ---- decoding with a KV cache (forward_cached) ----

// A generation schedule: each sequence's prompt goes in on its own (prefill), then every step feeds
// `t` more tokens to all sequences that still have them, in one batched call over sequences of
// different lengths. The output rows must equal the float64 composition's causal forward over each
// whole sequence: the cache, its RoPE positions and the per-sequence causal alignment all have to be
// right for that.
struct DecodeCase {
  std::string name;
  MultiHeadAttentionConfig config;
  KVCacheLayout layout = KVCacheLayout::contiguous;
  std::int64_t block_size = 2;
  std::vector<int64_t> prompts, totals;  // tokens per sequence: prompt, and in all
  std::vector<int64_t> steps;            // tokens per decode call, repeated from the last
  Window window{};
};

void PrintTo(const DecodeCase& c, std::ostream* os) { *os << c.name; }

class MultiHeadAttentionDecode : public ::testing::TestWithParam<DecodeCase> {};

TEST_P(MultiHeadAttentionDecode, EqualsTheFullCausalForwardOfEachSequence) {
  ATTNKIT_TRACE_SEED();
  const DecodeCase& c = GetParam();
  Rng rng(salt_of(c.name));
  MultiHeadAttention module(c.config, 5);
  randomize(module, rng);
  const Dims dm = dims_of(c.config);
  const Params p = params_from_state(module.state_dict(), dm);
  const int64_t count = static_cast<int64_t>(c.totals.size()), E = dm.E;
  int64_t longest = 0;
  for (int64_t total : c.totals) longest = std::max(longest, total);
  KVCache cache({.num_kv_heads = dm.Hkv, .head_dim = dm.d, .max_sequences = count + 1, .max_sequence_length = longest,
                 .layout = c.layout, .block_size = c.block_size});
  std::vector<KVCache::SequenceId> ids;
  for (int64_t b = 0; b < count; ++b) ids.push_back(cache.add_sequence());
  std::vector<Vec> tokens, outputs(at(count));  // [total, E] per sequence, inputs and the module's outputs
  for (int64_t b = 0; b < count; ++b) tokens.push_back(random_values(rng, c.totals[at(b)] * E, 1.0, DType::f32));
  const InputLayout layout = layout_of(c.config, false);
  CachedForwardOptions o;
  o.window = c.window;

  // Prefill, one sequence at a time.
  for (int64_t b = 0; b < count; ++b) {
    const int64_t t = c.prompts[at(b)];
    const Tensor x = to_caller(slice(tokens[at(b)], 0, t * E), 1, t, E, layout, DType::f32);
    const Tensor y = module.forward_cached(x.view(), cache, std::span(&ids[at(b)], 1), o);
    const Vec rows = from_caller(y, 1, t, E, layout);
    outputs[at(b)].insert(outputs[at(b)].end(), rows.begin(), rows.end());
  }
  // Decode steps over every sequence with tokens left.
  for (std::size_t step = 0;; ++step) {
    const int64_t t = c.steps[std::min(step, c.steps.size() - 1)];
    std::vector<int64_t> active;
    for (int64_t b = 0; b < count; ++b)
      if (cache.length(ids[at(b)]) + t <= c.totals[at(b)]) active.push_back(b);
    if (active.empty()) break;
    const int64_t B = static_cast<int64_t>(active.size());
    Vec x_rows;
    std::vector<KVCache::SequenceId> batch;
    for (int64_t b : active) {
      const Vec next = slice(tokens[at(b)], cache.length(ids[at(b)]) * E, t * E);
      x_rows.insert(x_rows.end(), next.begin(), next.end());
      batch.push_back(ids[at(b)]);
    }
    const Tensor y = module.forward_cached(to_caller(x_rows, B, t, E, layout, DType::f32).view(), cache, batch, o);
    const Vec rows = from_caller(y, B, t, E, layout);
    for (int64_t i = 0; i < B; ++i) {
      Vec& out = outputs[at(active[at(i)])];
      out.insert(out.end(), rows.begin() + i * t * E, rows.begin() + (i + 1) * t * E);
    }
  }

  for (int64_t b = 0; b < count; ++b) {
    SCOPED_TRACE("sequence " + std::to_string(b) + " of " + std::to_string(c.totals[at(b)]) + " tokens");
    const int64_t total = c.totals[at(b)];
    ASSERT_EQ(cache.length(ids[at(b)]), total) << "the schedule must feed every token";
    Sequences x;
    x.B = 1;
    x.n = x.m = total;
    x.xq = x.xk = x.xv = tokens[at(b)];
    MultiHeadAttentionOptions full;
    full.causal = Causal::top_left;  // n = m: the same as bottom-right
    full.window = c.window;
    const CompositionForward f = composition_forward(dm, p, x, full, false);
    expect_close("decoded outputs", outputs[at(b)], f.y);
  }
}

// clang-format off
INSTANTIATE_TEST_SUITE_P(
    Cases, MultiHeadAttentionDecode,
    ::testing::Values(
        DecodeCase{.name = "contiguous_gqa_rope", .config = {.embed_dim = 24, .num_heads = 4, .num_kv_heads = 2, .rope = RopeConfig{}},
                   .prompts = {5, 1, 9}, .totals = {12, 8, 14}, .steps = {1}},
        DecodeCase{.name = "paged_gqa_rope", .config = {.embed_dim = 24, .num_heads = 4, .num_kv_heads = 2, .rope = RopeConfig{}},
                   .layout = KVCacheLayout::paged, .prompts = {5, 1, 9}, .totals = {12, 8, 14}, .steps = {1}},
        DecodeCase{.name = "paged_mqa_interleaved_rope_chunks",
                   .config = {.embed_dim = 20, .num_heads = 2, .num_kv_heads = 1,
                              .rope = RopeConfig{.base = 500.0, .layout = RopeLayout::interleaved}},
                   .layout = KVCacheLayout::paged, .block_size = 4, .prompts = {2, 7}, .totals = {11, 16}, .steps = {3, 1}},
        DecodeCase{.name = "contiguous_seq_first_no_rope", .config = {.embed_dim = 12, .num_heads = 3, .batch_first = false},
                   .prompts = {1, 4, 2, 6}, .totals = {9, 7, 10, 6}, .steps = {2, 1}},
        DecodeCase{.name = "paged_window_long", .config = {.embed_dim = 16, .num_heads = 4, .num_kv_heads = 2, .rope = RopeConfig{}},
                   .layout = KVCacheLayout::paged, .block_size = 16, .prompts = {150, 3}, .totals = {160, 140}, .steps = {1},
                   .window = {20, 0}},
        DecodeCase{.name = "paged_long_prompt_past_two_key_blocks",
                   .config = {.embed_dim = 16, .num_heads = 2, .rope = RopeConfig{}},
                   .layout = KVCacheLayout::paged, .block_size = 8, .prompts = {270, 40}, .totals = {275, 45}, .steps = {1}}),
    [](const ::testing::TestParamInfo<DecodeCase>& info) { return info.param.name; });
// clang-format on

// forward_cached over int8 and int4 caches: a prefill then single-token steps, the same
// tokens through an f32 cache alongside. The quantized cache must hold the f32 cache's rows (the
// projected, rotated keys and the values) within half a quantisation step of their block, and the
// outputs stay within the quantisation's error of the f32 cache's (attend itself is checked bit for
// bit against the stored values in test_decode_properties.cpp).
TEST(MultiHeadAttentionDecode, QuantizedCachesHoldTheRowsAndStayCloseToAnF32Cache) {
  ATTNKIT_TRACE_SEED();
  Rng rng(77);
  const MultiHeadAttentionConfig config{.embed_dim = 128, .num_heads = 4, .num_kv_heads = 2, .rope = RopeConfig{}};
  MultiHeadAttention module(config, 5);
  randomize(module, rng);
  const int64_t E = 128, prompt = 40, total = 48;
  const Vec tokens = random_values(rng, total * E, 1.0, DType::f32);
  const InputLayout layout = layout_of(config, false);
  auto run = [&](DType storage, Vec& outputs) {
    KVCache cache({.num_kv_heads = 2, .head_dim = 32, .max_sequence_length = total, .layout = KVCacheLayout::paged,
                   .block_size = 16, .dtype = storage});
    const KVCache::SequenceId id = cache.add_sequence();
    Tensor y = module.forward_cached(to_caller(slice(tokens, 0, prompt * E), 1, prompt, E, layout, DType::f32).view(), cache,
                                     std::span(&id, 1));
    outputs = from_caller(y, 1, prompt, E, layout);
    for (int64_t j = prompt; j < total; ++j) {
      y = module.forward_cached(to_caller(slice(tokens, j * E, E), 1, 1, E, layout, DType::f32).view(), cache, std::span(&id, 1));
      const Vec row = from_caller(y, 1, 1, E, layout);
      outputs.insert(outputs.end(), row.begin(), row.end());
    }
    return std::pair{Tensor::converted(cache.keys(id).view(), DType::f64), Tensor::converted(cache.values(id).view(), DType::f64)};
  };
  Vec exact;
  const auto [k32, v32] = run(DType::f32, exact);
  double exact_rms = 0;
  for (double x : exact) exact_rms += x * x;
  exact_rms = std::sqrt(exact_rms / static_cast<double>(exact.size()));
  for (auto [storage, bound] : {std::pair{DType::int8, 0.02}, std::pair{DType::int4, 0.3}, std::pair{DType::fp8_e4m3, 0.06},
                                std::pair{DType::fp8_e5m2, 0.12}}) {
    SCOPED_TRACE(dtype_name(storage));
    Vec got;
    const auto [kq, vq] = run(storage, got);
    for (const auto& [stored, want] : {std::pair{&kq, &k32}, std::pair{&vq, &v32}}) {
      const double* s = stored->data<double>();
      const double* w = want->data<double>();
      ASSERT_EQ(stored->numel(), want->numel());
      for (int64_t b = 0; b < want->numel() / kQuantBlock; ++b) {  // blocks of 32 features of one row
        for (int64_t i = 0; i < kQuantBlock; ++i) {
          const double bound = testing::quantisation_bound(storage, w + b * kQuantBlock, i);
          ASSERT_LE(std::fabs(s[b * kQuantBlock + i] - w[b * kQuantBlock + i]), bound) << "block " << b;
        }
      }
    }
    double error = 0;
    for (std::size_t i = 0; i < got.size(); ++i) error += (got[i] - exact[i]) * (got[i] - exact[i]);
    error = std::sqrt(error / static_cast<double>(got.size())) / exact_rms;
    EXPECT_LT(error, bound) << "relative RMS error of the outputs";
    EXPECT_GT(error, 0.0) << "the quantized cache gave the f32 cache's outputs exactly: was it quantized?";
  }
}

TEST(MultiHeadAttentionDecodeErrors, RaiseNamingTheArgumentAndLeaveTheCacheUnchanged) {
  ATTNKIT_TRACE_SEED();
  Rng rng(31);
  MultiHeadAttention module({.embed_dim = 8, .num_heads = 2, .num_kv_heads = 1}, 1);
  KVCache cache({.num_kv_heads = 1, .head_dim = 4, .max_sequences = 2, .max_sequence_length = 5});
  const KVCache::SequenceId a = cache.add_sequence(), b = cache.add_sequence();
  const Tensor three = testing::random_tensor(rng, {1, 3, 8}, DType::f32);
  const Tensor pair = testing::random_tensor(rng, {2, 1, 8}, DType::f32);
  (void)module.forward_cached(three.view(), cache, std::span(&a, 1));
  const Tensor keys_before = cache.keys(a);

  // The cache is full for `a` after 5 tokens: 3 more would need 6.
  expect_error([&] { (void)module.forward_cached(three.view(), cache, std::span(&a, 1)); }, ErrorCode::capacity_exceeded,
               "max_sequence_length", "past the limit");
  const KVCache::SequenceId both[] = {a, b}, twice[] = {b, b};
  expect_error([&] { (void)module.forward_cached(pair.view(), cache, twice); }, ErrorCode::invalid_argument, "twice",
               "a sequence twice");
  expect_error([&] { (void)module.forward_cached(pair.view(), cache, std::span(&a, 1)); }, ErrorCode::invalid_shape,
               "sequences", "two rows, one sequence");
  expect_error([&] { (void)module.forward_cached(pair.view(), cache, std::span<const KVCache::SequenceId>(both, 1)); },
               ErrorCode::invalid_shape, "sequences", "two rows, one sequence listed");
  const KVCache::SequenceId unknown = 99;
  expect_error([&] { (void)module.forward_cached(three.view(), cache, std::span(&unknown, 1)); }, ErrorCode::invalid_argument,
               "sequences[0]: sequence 99", "unknown sequence");
  const Tensor wide = testing::random_tensor(rng, {1, 1, 9}, DType::f32);
  expect_error([&] { (void)module.forward_cached(wide.view(), cache, std::span(&a, 1)); }, ErrorCode::invalid_shape, "x",
               "wrong width");
  KVCache other({.num_kv_heads = 2, .head_dim = 4, .max_sequences = 1, .max_sequence_length = 5});
  const KVCache::SequenceId c = other.add_sequence();
  expect_error([&] { (void)module.forward_cached(three.view(), other, std::span(&c, 1)); }, ErrorCode::invalid_shape, "cache",
               "a cache of other heads");
  EXPECT_EQ(cache.length(a), 3);
  EXPECT_EQ(cache.length(b), 0);
  EXPECT_EQ(other.length(c), 0);
  EXPECT_TRUE(testing::bitwise_equal(cache.keys(a), keys_before));
  // Both sequences step once together: a has room for 2 more, b for 5.
  const Tensor y = module.forward_cached(pair.view(), cache, both);
  EXPECT_EQ(y.shape(), (std::vector<int64_t>{2, 1, 8}));
  EXPECT_EQ(cache.length(a), 4);
  EXPECT_EQ(cache.length(b), 1);
}

// RoPE positions are int64: a first position whose last one would overflow is refused by name.
TEST(MultiHeadAttentionErrors, RopePositionsThatOverflowInt64AreRefused) {
  Rng rng(32);
  MultiHeadAttention module({.embed_dim = 8, .num_heads = 2, .head_dim = 4, .rope = RopeConfig{}}, 1);
  const Tensor x = testing::random_tensor(rng, {1, 3, 8}, DType::f32);
  MultiHeadAttentionOptions options;
  options.query_position = std::numeric_limits<std::int64_t>::max() - 2;  // positions ..., INT64_MAX: fine
  options.key_position = std::numeric_limits<std::int64_t>::max() - 2;
  EXPECT_NO_THROW((void)module.forward(x.view(), x.view(), x.view(), options));
  options.query_position = std::numeric_limits<std::int64_t>::max() - 1;
  expect_error([&] { (void)module.forward(x.view(), x.view(), x.view(), options); }, ErrorCode::invalid_argument,
               "query_position: 9223372036854775806 + 2", "query positions past INT64_MAX");
  options.query_position = 0;
  options.key_position = std::numeric_limits<std::int64_t>::max();
  expect_error([&] { (void)module.forward(x.view(), x.view(), x.view(), options); }, ErrorCode::invalid_argument,
               "key_position", "key positions past INT64_MAX");
}

}  // namespace
}  // namespace attnkit
