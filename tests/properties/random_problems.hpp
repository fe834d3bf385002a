// Random attention problems for the property tests, the helpers that rearrange them (reorder, delete
// or slice keys, slice the batch, fold options into a mask), and one call of a kernel on a problem.
//
// A problem keeps q, k and v as float64 values in the logical order [B, H, S, D], drawn from the test
// seed and rounded once to the kernel's dtype, so that rearranging them and storing them again in
// that dtype is exact: the two sides of a property see the same numbers, only arranged differently.
// Each call stores them in a random memory layout (contiguous, or [B, S, H, D] with padded rows seen
// through strides) and NaN-poisons every output first.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "attnkit/attnkit.hpp"
#include "properties/kernel_matrix.hpp"
#include "support/testing.hpp"

namespace attnkit::properties {

using std::int64_t;
using testing::Distribution;
using testing::Rng;

#ifdef NDEBUG
inline constexpr bool kOptimisedBuild = true;
#else
inline constexpr bool kOptimisedBuild = false;  // sanitizer and debug builds: fewer, smaller problems
#endif

inline constexpr double kInf = std::numeric_limits<double>::infinity();

struct Sizes {
  int64_t B = 1, Hq = 1, Hkv = 1, n = 1, m = 1, d_k = 1, d_v = 1;
  int64_t group() const { return Hq / Hkv; }
};

// Shape families, by the fast kernel's paths they reach.
enum class Shape : std::uint8_t {
  small,         // n <= 40 queries over m <= 300 keys
  split_decode,  // n <= 16 queries (kDecodeQueries) over m > 1024 keys (kSplitKeys): split keys, merged
  prefill,       // n > 16 queries: tiles of many rows, no split
};
inline const char* shape_name(Shape s) {
  switch (s) {
    case Shape::small: return "small";
    case Shape::split_decode: return "split_decode";
    case Shape::prefill: return "prefill";
  }
  return "?";
}
// Random problems per test, cycling through the shape families so that each test meets all of them.
inline int cases_per_test() { return kOptimisedBuild ? 6 : 3; }
inline Shape shape_of_case(int index) { return static_cast<Shape>(index % 3); }

enum class Layout : std::uint8_t {
  contiguous,      // [B, H, S, D] in memory
  sequence_major,  // [B, S, H, D + padding] in memory, seen as [B, H, S, D] through strides
};
inline constexpr int64_t kRowPadding = 3;  // elements after each row of a sequence_major layout

// Which options a property lets the generator draw (each is then drawn at random).
struct OptionSpace {
  bool top_left = true, bottom_right = true, window = true, alibi = true, key_lengths = true;
  bool keep_mask = true, additive_mask = true, softcap = true, scale = true, dropout = false;
  int64_t min_batch = 1;
};

// One attention problem: the inputs as float64, exactly representable in the kernel's dtype, and the
// options with the memory they refer to.
struct Case {
  Sizes size;
  Tensor q, k, v;              // [B, Hq, n, d_k], [B, Hkv, m, d_k], [B, Hkv, m, d_v]
  std::optional<Tensor> mask;  // bool keep-mask or floating additive; rank 2 or 4, possibly broadcast
  std::vector<int64_t> key_lengths;
  std::vector<float> alibi_slopes;
  AttentionOptions settings;  // scale, causal, window, softcap, dropout and seed; options() adds the rest
  Layout q_layout = Layout::contiguous, k_layout = Layout::contiguous, v_layout = Layout::contiguous,
         out_layout = Layout::contiguous;

  AttentionOptions options() const {
    AttentionOptions o = settings;
    if (mask) o.mask = mask->view();
    o.key_lengths = key_lengths;
    o.alibi_slopes = alibi_slopes;
    return o;
  }

  std::string describe() const {
    const Sizes& s = size;
    std::string d = "B=" + std::to_string(s.B) + " Hq=" + std::to_string(s.Hq) + " Hkv=" + std::to_string(s.Hkv) +
                    " n=" + std::to_string(s.n) + " m=" + std::to_string(s.m) + " d_k=" + std::to_string(s.d_k) +
                    " d_v=" + std::to_string(s.d_v);
    const char* causal[] = {"none", "top_left", "bottom_right"};
    d += std::string(" causal=") + causal[static_cast<int>(settings.causal)];
    if (settings.window.left >= 0 || settings.window.right >= 0)
      d += " window=(" + std::to_string(settings.window.left) + "," + std::to_string(settings.window.right) + ")";
    if (!alibi_slopes.empty()) d += " alibi";
    if (!key_lengths.empty()) {
      d += " key_lengths=(";
      for (int64_t l : key_lengths) d += std::to_string(l) + ",";
      d.back() = ')';
    }
    if (mask) d += std::string(" mask=") + std::string(dtype_name(mask->dtype())) + mask->view().shape_string();
    if (settings.softcap > 0) d += " softcap=" + std::to_string(settings.softcap);
    if (settings.scale) d += " scale=" + std::to_string(*settings.scale);
    if (settings.dropout_p > 0) d += " dropout=" + std::to_string(settings.dropout_p);
    const Layout layouts[] = {q_layout, k_layout, v_layout, out_layout};
    d += " strided:";
    for (int t = 0; t < 4; ++t) d += layouts[t] == Layout::sequence_major ? "qkvo"[t] : '-';
    return d;
  }
};

// ---- random generation ----

// A size in [lo, hi] that is a multiple of neither 6 (register tile rows) nor 8 (so not of 16 either:
// vector and tile widths), so that every loop has a tail. lo must not be such a multiple.
inline int64_t odd_size(Rng& rng, int64_t lo, int64_t hi) {
  const int64_t x = rng.integer(lo, hi);
  return x % 6 == 0 || x % 8 == 0 ? x - 1 : x;
}

inline Sizes random_sizes(Rng& rng, Shape shape) {
  Sizes s;
  s.Hkv = rng.integer(1, 2);
  s.Hq = s.Hkv * rng.integer(1, 3);  // MHA or GQA (Hkv = 1: MQA)
  switch (shape) {
    case Shape::small:
      s.B = rng.integer(1, 3), s.n = odd_size(rng, 1, 40), s.m = odd_size(rng, 1, 300);
      break;
    case Shape::split_decode:
      s.B = rng.integer(1, 2), s.n = odd_size(rng, 1, 16), s.m = odd_size(rng, 1025, kOptimisedBuild ? 2300 : 1300);
      break;
    case Shape::prefill:
      s.B = rng.integer(1, 2), s.n = odd_size(rng, 17, kOptimisedBuild ? 150 : 50),
      s.m = odd_size(rng, 17, kOptimisedBuild ? 400 : 120);
      break;
  }
  s.d_k = odd_size(rng, 1, 70);
  s.d_v = rng.uniform() < 0.5 ? s.d_k : odd_size(rng, 1, 70);
  return s;
}

// Values drawn in float64 and rounded once to `dtype`, kept as float64: exact in `dtype`.
inline Tensor random_values(Rng& rng, std::vector<int64_t> shape, DType dtype, Distribution dist) {
  const Tensor drawn = testing::random_tensor(rng, std::move(shape), DType::f64, dist);
  return Tensor::converted(Tensor::converted(drawn.view(), dtype).view(), DType::f64);
}

// Additive mask values and per-row shifts live on a grid of 1/64 with |x| <= 4 (shifts: 8), so that a
// mask plus ALiBi plus a shift is exact in float32: the two sides of a property add the same numbers.
inline double grid_value(Rng& rng, int64_t limit = 4) { return static_cast<double>(rng.integer(-64 * limit, 64 * limit)) / 64; }

// Slopes that float32 holds exactly, whose products with positions (< 2^12) are exact too.
inline constexpr float kSlopes[] = {0.5f, 0.25f, 0.125f, 0.0625f, 0.375f, 0.1875f, 0.03125f};

// A bool keep-mask (true w.p. 0.8) or an additive mask (grid values, −inf w.p. 0.1), each dimension of
// [B, Hq, n, m] (or, rank 2, of [n, m]) broadcast with probability 1/3.
inline Tensor random_mask(Rng& rng, const Sizes& s, bool keep) {
  auto maybe_broadcast = [&](int64_t size) { return rng.uniform() < 1.0 / 3 ? 1 : size; };
  std::vector<int64_t> shape;
  if (rng.uniform() < 0.25) {
    shape = {maybe_broadcast(s.n), maybe_broadcast(s.m)};
  } else {
    shape = {maybe_broadcast(s.B), maybe_broadcast(s.Hq), maybe_broadcast(s.n), maybe_broadcast(s.m)};
  }
  if (keep) {
    Tensor mask(DType::boolean, shape);
    for (int64_t i = 0; i < mask.numel(); ++i) mask.data<bool>()[i] = rng.uniform() < 0.8;
    return mask;
  }
  Tensor mask(DType::f64, shape);
  for (int64_t i = 0; i < mask.numel(); ++i) mask.data<double>()[i] = rng.uniform() < 0.1 ? -kInf : grid_value(rng);
  return rng.uniform() < 0.5 ? Tensor::converted(mask.view(), DType::f32) : std::move(mask);
}

inline Case random_case(Rng& rng, const Variant& variant, Shape shape, const OptionSpace& space) {
  Case c;
  c.size = random_sizes(rng, shape);
  c.size.B = std::max(c.size.B, space.min_batch);
  const Sizes& s = c.size;
  auto chance = [&](double p) { return rng.uniform() < p; };
  auto logit_distribution = [&] { return chance(0.5) ? Distribution::gaussian : Distribution::with_outliers; };
  c.q = random_values(rng, {s.B, s.Hq, s.n, s.d_k}, variant.dtype, logit_distribution());
  c.k = random_values(rng, {s.B, s.Hkv, s.m, s.d_k}, variant.dtype, logit_distribution());
  c.v = random_values(rng, {s.B, s.Hkv, s.m, s.d_v}, variant.dtype, Distribution::gaussian);

  AttentionOptions& o = c.settings;
  if (space.scale && chance(0.5)) o.scale = 0.05 + 0.55 * rng.uniform();
  std::vector<Causal> causal = {Causal::none};
  if (space.top_left) causal.push_back(Causal::top_left);
  if (space.bottom_right) causal.push_back(Causal::bottom_right);
  o.causal = causal[static_cast<std::size_t>(rng.integer(0, static_cast<int64_t>(causal.size()) - 1))];
  if (space.window && chance(0.35)) {
    o.window.left = chance(0.7) ? rng.integer(0, s.m) : -1;
    o.window.right = o.window.left < 0 || chance(0.5) ? rng.integer(0, s.m) : -1;
  }
  if (space.alibi && chance(0.35)) {
    for (int64_t h = 0; h < s.Hq; ++h) c.alibi_slopes.push_back(kSlopes[rng.integer(0, std::size(kSlopes) - 1)]);
  }
  if (space.key_lengths && chance(0.35)) {
    for (int64_t b = 0; b < s.B; ++b) c.key_lengths.push_back(chance(0.2) ? s.m : rng.integer(0, s.m));
  }
  std::vector<bool> kinds;  // true: keep-mask
  if (space.keep_mask) kinds.push_back(true);
  if (space.additive_mask) kinds.push_back(false);
  if (!kinds.empty() && chance(0.5)) {
    c.mask = random_mask(rng, s, kinds[static_cast<std::size_t>(rng.integer(0, static_cast<int64_t>(kinds.size()) - 1))]);
  }
  if (space.softcap && chance(0.3)) o.softcap = std::array{2.5, 5.0, 20.0, 50.0}[static_cast<std::size_t>(rng.integer(0, 3))];
  if (space.dropout && chance(0.5)) {
    o.dropout_p = std::array{0.1, 0.3, 0.6}[static_cast<std::size_t>(rng.integer(0, 2))];
    o.seed = static_cast<std::uint64_t>(rng.integer(0, std::numeric_limits<int64_t>::max()));
  }
  auto layout = [&] { return chance(0.5) ? Layout::sequence_major : Layout::contiguous; };
  c.q_layout = layout(), c.k_layout = layout(), c.v_layout = layout(), c.out_layout = layout();
  return c;
}

// ---- the formula's options on the host ----

// Element (b, h, i, j) of a mask of any broadcastable shape, as float64 (a keep-mask reads 1 or 0;
// no mask reads 0).
class MaskReader {
 public:
  explicit MaskReader(const std::optional<Tensor>& mask) : mask_(mask ? &*mask : nullptr) {
    if (mask_ == nullptr) return;
    const ConstTensorView view = mask_->view().unsqueezed_to(4);
    for (int d = 0; d < 4; ++d) strides_[static_cast<std::size_t>(d)] = view.size(d) == 1 ? 0 : view.stride(d);
  }
  double operator()(int64_t b, int64_t h, int64_t i, int64_t j) const {
    if (mask_ == nullptr) return 0.0;
    const int64_t offset = b * strides_[0] + h * strides_[1] + i * strides_[2] + j * strides_[3];
    return load_as_double(static_cast<const std::byte*>(mask_->raw()) + offset * static_cast<int64_t>(dtype_size(mask_->dtype())),
                          mask_->dtype());
  }

 private:
  const Tensor* mask_;
  std::array<int64_t, 4> strides_{};
};

// Every option but scale, softcap and dropout as one additive mask [B, Hq, n, m] in float64: where key j
// is visible to query i (bool mask, causal, window, key_lengths, additive −inf), the ALiBi bias plus
// the additive mask; −inf elsewhere. Softcap comes before both in the formula, so folding is exact.
inline Tensor explicit_mask(const Case& c) {
  const Sizes& s = c.size;
  const AttentionOptions& o = c.settings;
  Tensor out(DType::f64, {s.B, s.Hq, s.n, s.m});
  double* z = out.data<double>();
  const MaskReader mask(c.mask);
  const bool keep = c.mask && c.mask->dtype() == DType::boolean;
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.Hq; ++h)
      for (int64_t i = 0; i < s.n; ++i) {
        const int64_t position = o.causal == Causal::bottom_right ? i + (s.m - s.n) : i;  // i' of docs/semantics.md
        for (int64_t j = 0; j < s.m; ++j, ++z) {
          const double m = mask(b, h, i, j);
          const bool visible = !(o.causal != Causal::none && j > position) &&
                               !(o.window.left >= 0 && j < position - o.window.left) &&
                               !(o.window.right >= 0 && j > position + o.window.right) &&
                               !(!c.key_lengths.empty() && j >= c.key_lengths[static_cast<std::size_t>(b)]) &&
                               !(keep && m == 0) && m != -kInf;
          const double alibi =
              c.alibi_slopes.empty() ? 0.0 : c.alibi_slopes[static_cast<std::size_t>(h)] * static_cast<double>(std::llabs(position - j));
          *z = visible ? (keep ? 0.0 : m) - alibi : -kInf;
        }
      }
  return out;
}

// The mask as stored, expanded to [B, Hq, n, m] in float64 (a keep-mask reads 1 or 0).
inline Tensor expanded_mask(const Case& c) {
  const Sizes& s = c.size;
  Tensor out(DType::f64, {s.B, s.Hq, s.n, s.m});
  const MaskReader mask(c.mask);
  double* z = out.data<double>();
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.Hq; ++h)
      for (int64_t i = 0; i < s.n; ++i)
        for (int64_t j = 0; j < s.m; ++j) *z++ = mask(b, h, i, j);
  return out;
}

// float64 mask values stored as `dtype`: a keep-mask keeps the nonzero entries; floating is converted.
inline Tensor as_mask(const Tensor& values, DType dtype) {
  if (dtype != DType::boolean) return Tensor::converted(values.view(), dtype);
  Tensor keep(DType::boolean, values.shape());
  for (int64_t i = 0; i < values.numel(); ++i) keep.data<bool>()[i] = values.data<double>()[i] != 0;
  return keep;
}

// Row [b, h, i, :] of a contiguous float64 rank-4 tensor.
inline const double* row_of(const Tensor& t, int64_t b, int64_t h, int64_t i) {
  const auto& s = t.shape();
  return t.data<double>() + ((b * s[1] + h) * s[2] + i) * s[3];
}

// The magnitude of the numbers rounded while computing the logits that carry weight: per key, |logit|
// plus scale · Σ_c |q_c · k_c| (the dot product's terms: the fast kernel sums them in another order
// on a decode tile than on a packed one), over the keys within 40 of their row's largest logit (the
// others weigh < e^-40 and cannot move a result by a rounding); the largest over all rows. A logit's
// rounding, and so the tolerances, scale with it. The tolerances allow a few roundings of this scale
// (kLogitRoundings in comparison.hpp), but a dot product of d_k terms summed in two orders differs by
// about √d_k roundings of its terms' magnitude (a random walk of one rounding per term; at d_k = 65,
// 5.5 were seen): past d_k = 16 the terms count √d_k / 4 times, so that the allowance grows with it.
inline double logit_scale(const Case& c, const Tensor& folded) {
  const Sizes& s = c.size;
  const double scale = c.settings.scale ? *c.settings.scale : 1 / std::sqrt(static_cast<double>(s.d_k));
  const double dot_roundings = std::max(1.0, std::sqrt(static_cast<double>(s.d_k)) / 4);
  const double softcap = c.settings.softcap;
  double worst = 0;
  std::vector<double> z(static_cast<std::size_t>(s.m)), terms(static_cast<std::size_t>(s.m));
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.Hq; ++h)
      for (int64_t i = 0; i < s.n; ++i) {
        const double* q = row_of(c.q, b, h, i);
        const double* bias = row_of(folded, b, h, i);
        double row_max = -kInf;
        for (int64_t j = 0; j < s.m; ++j) {
          double dot = 0, magnitude = 0;
          const double* k = row_of(c.k, b, h / s.group(), j);
          for (int64_t e = 0; e < s.d_k; ++e) dot += q[e] * k[e], magnitude += std::fabs(q[e] * k[e]);
          double logit = dot * scale;
          if (softcap > 0) logit = softcap * std::tanh(logit / softcap);
          const std::size_t at = static_cast<std::size_t>(j);
          z[at] = bias[j] == -kInf ? -kInf : logit + bias[j];
          terms[at] = std::fabs(z[at]) + magnitude * scale * dot_roundings;
          row_max = std::max(row_max, z[at]);
        }
        for (std::size_t j = 0; j < z.size(); ++j)
          if (z[j] != -kInf && z[j] >= row_max - 40) worst = std::max(worst, terms[j]);
      }
  return worst;
}

// max|V|, over 1 − p with dropout: a bound on |O| (a convex combination of the value rows, scaled up
// by dropout's 1/(1 − p)).
inline double value_scale(const Case& c) {
  double worst = 0;
  for (int64_t i = 0; i < c.v.numel(); ++i) worst = std::max(worst, std::fabs(c.v.data<double>()[i]));
  return std::max(worst, 1e-30) / (1 - c.settings.dropout_p);
}

// ---- rearranging a problem ----

// out[b, h, i, j] = src[from(b, h, i, j)] for float64 rank-4 tensors.
template <class From>
Tensor gather(const Tensor& src, std::array<int64_t, 4> shape, From from) {
  Tensor out(DType::f64, {shape[0], shape[1], shape[2], shape[3]});
  const auto& s = src.shape();
  double* o = out.data<double>();
  for (int64_t b = 0; b < shape[0]; ++b)
    for (int64_t h = 0; h < shape[1]; ++h)
      for (int64_t i = 0; i < shape[2]; ++i)
        for (int64_t j = 0; j < shape[3]; ++j) {
          const std::array<int64_t, 4> at = from(b, h, i, j);
          *o++ = src.data<double>()[((at[0] * s[1] + at[1]) * s[2] + at[2]) * s[3] + at[3]];
        }
  return out;
}

// Which keys, in which order, each (batch entry, KV head) keeps: row j of the result is row
// order[b · Hkv + g][j] of the original. All lists have one length.
using KeyOrder = std::vector<std::vector<int64_t>>;

inline KeyOrder key_range(int64_t lists, int64_t begin, int64_t end) {
  std::vector<int64_t> keys(static_cast<std::size_t>(std::max<int64_t>(end - begin, 0)));
  std::iota(keys.begin(), keys.end(), begin);
  return KeyOrder(static_cast<std::size_t>(lists), keys);
}

// Keys or values [B, Hkv, m, d] in the order `order` lists.
inline Tensor reorder_keys(const Tensor& t, const KeyOrder& order) {
  const auto& s = t.shape();
  const int64_t kept = static_cast<int64_t>(order.front().size());
  return gather(t, {s[0], s[1], kept, s[3]}, [&](int64_t b, int64_t g, int64_t j, int64_t c) {
    return std::array<int64_t, 4>{b, g, order[static_cast<std::size_t>(b * s[1] + g)][static_cast<std::size_t>(j)], c};
  });
}

// The columns of a mask [B, Hq, n, m] following the keys of each query head's KV head.
inline Tensor reorder_mask_columns(const Tensor& mask, const KeyOrder& order, int64_t group, int64_t kv_heads) {
  const auto& s = mask.shape();
  const int64_t kept = static_cast<int64_t>(order.front().size());
  return gather(mask, {s[0], s[1], s[2], kept}, [&](int64_t b, int64_t h, int64_t i, int64_t j) {
    return std::array<int64_t, 4>{b, h, i, order[static_cast<std::size_t>(b * kv_heads + h / group)][static_cast<std::size_t>(j)]};
  });
}

// Entry b of the batch (or entry 0 of a broadcast dimension), keeping rank 4: [1, ...].
inline Tensor batch_entry(const Tensor& t, int64_t b) {
  const auto& s = t.shape();
  return gather(t, {1, s[1], s[2], s[3]}, [&](int64_t, int64_t h, int64_t i, int64_t j) {
    return std::array<int64_t, 4>{s[0] == 1 ? 0 : b, h, i, j};
  });
}

// Rows [begin, end) of dimension 2 (queries of q, rows of a mask).
inline Tensor row_range(const Tensor& t, int64_t begin, int64_t end) {
  const auto& s = t.shape();
  return gather(t, {s[0], s[1], end - begin, s[3]}, [&](int64_t b, int64_t h, int64_t i, int64_t j) {
    return std::array<int64_t, 4>{b, h, begin + i, j};
  });
}

// A problem with c's q (or `q`), scale, softcap and dropout, the keys and values k and v, and every
// other option replaced by `mask` ([B, Hq, n, m] float64, as explicit_mask makes it). The mask is
// stored as float32: its values (grid, ALiBi products, −inf) are exact there.
inline Case with_explicit_mask(const Case& c, Tensor q, Tensor k, Tensor v, const Tensor& mask) {
  Case d;
  d.size = c.size;
  d.size.B = q.shape()[0];
  d.size.n = q.shape()[2];
  d.size.m = k.shape()[2];
  d.q = std::move(q), d.k = std::move(k), d.v = std::move(v);
  d.mask = Tensor::converted(mask.view(), DType::f32);
  d.settings.scale = c.settings.scale;
  d.settings.softcap = c.settings.softcap;
  d.settings.dropout_p = c.settings.dropout_p;
  d.settings.seed = c.settings.seed;
  d.q_layout = c.q_layout, d.k_layout = c.k_layout, d.v_layout = c.v_layout, d.out_layout = c.out_layout;
  return d;
}

// ---- one call ----

// A float64 tensor [B, H, S, D] stored in `dtype` and `layout`, and the view the kernel gets.
struct Stored {
  Tensor memory;
  TensorView view;
};

inline Stored stored(const std::vector<int64_t>& shape, DType dtype, Layout layout) {
  const int64_t B = shape[0], H = shape[1], S = shape[2], D = shape[3];
  Stored s;
  if (layout == Layout::contiguous) {
    s.memory = Tensor(dtype, shape);
    s.view = s.memory.view();
  } else {
    s.memory = Tensor(dtype, {B, S, H, D + kRowPadding});
    s.view = TensorView(s.memory.raw(), dtype, {B, H, S, D}, {S * H * (D + kRowPadding), D + kRowPadding, H * (D + kRowPadding), 1});
  }
  return s;
}

inline Stored store(const Tensor& values, DType dtype, Layout layout) {
  Stored s = stored(values.shape(), dtype, layout);
  const auto& sh = values.shape();
  const double* x = values.data<double>();
  const std::int64_t elem = static_cast<std::int64_t>(dtype_size(dtype));
  for (int64_t b = 0; b < sh[0]; ++b)
    for (int64_t h = 0; h < sh[1]; ++h)
      for (int64_t i = 0; i < sh[2]; ++i)
        for (int64_t j = 0; j < sh[3]; ++j) {
          const int64_t offset = b * s.view.stride(0) + h * s.view.stride(1) + i * s.view.stride(2) + j * s.view.stride(3);
          store_from_double(static_cast<std::byte*>(s.view.data()) + offset * elem, dtype, *x++);
        }
  return s;
}

inline Stored poisoned_output(const std::vector<int64_t>& shape, DType dtype, Layout layout) {
  Stored s = stored(shape, dtype, layout);
  testing::poison(s.memory);
  return s;
}

struct Outcome {
  Tensor out;    // float64 [B, Hq, n, d_v], converted from the kernel's dtype
  Tensor lse;    // float32 [B, Hq, n]
  Tensor probs;  // float64 [B, Hq, n, m] when asked for, converted from `probs_dtype`
};

// One forward call of the variant's kernel (the caller forces the target) on the problem.
inline Outcome run(const Variant& variant, const Case& c, std::optional<DType> probs_dtype = std::nullopt) {
  const Sizes& s = c.size;
  const Stored q = store(c.q, variant.dtype, c.q_layout), k = store(c.k, variant.dtype, c.k_layout),
               v = store(c.v, variant.dtype, c.v_layout);
  Stored out = poisoned_output({s.B, s.Hq, s.n, s.d_v}, variant.dtype, c.out_layout);
  Tensor lse = testing::poisoned(DType::f32, {s.B, s.Hq, s.n});
  Tensor probs = probs_dtype ? testing::poisoned(*probs_dtype, {s.B, s.Hq, s.n, s.m}) : Tensor();
  AttentionOptions options = c.options();
  options.kernel = variant.kernel;
  ForwardExtras extras{lse.view(), std::nullopt};
  if (probs_dtype) extras.probs = probs.view();
  forward(q.view, k.view, v.view, out.view, options, extras);
  return {Tensor::converted(out.view, DType::f64), std::move(lse),
          probs_dtype ? Tensor::converted(probs.view(), DType::f64) : Tensor()};
}

// Runs body(case, rng) on cases_per_test() random problems from the test seed, cycling through the
// shape families; the trace names each problem. `salt` separates the tests' streams; every kernel of
// the matrix gets the same problems (rounded to its dtype).
template <class Body>
void for_each_case(const Variant& variant, const OptionSpace& space, std::uint64_t salt, Body body) {
  Rng rng(salt);
  for (int index = 0; index < cases_per_test(); ++index) {
    const Case c = random_case(rng, variant, shape_of_case(index), space);
    SCOPED_TRACE("case " + std::to_string(index) + " (" + shape_name(shape_of_case(index)) + "): " + c.describe());
    body(c, rng);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// A random permutation of 0 .. count − 1.
inline std::vector<int64_t> random_permutation(Rng& rng, int64_t count) {
  std::vector<int64_t> p(static_cast<std::size_t>(count));
  std::iota(p.begin(), p.end(), 0);
  for (int64_t i = count - 1; i > 0; --i) std::swap(p[static_cast<std::size_t>(i)], p[static_cast<std::size_t>(rng.integer(0, i))]);
  return p;
}

// lse [B, H, n] (float32) as float64 [B, H, n, 1], for the rank-4 helpers.
inline Tensor lse_as4(const Tensor& lse) {
  const auto& s = lse.shape();
  Tensor out = Tensor::converted(lse.view(), DType::f64);
  Tensor shaped(DType::f64, {s[0], s[1], s[2], 1});
  std::copy_n(out.data<double>(), out.numel(), shaped.data<double>());
  return shaped;
}

}  // namespace attnkit::properties
