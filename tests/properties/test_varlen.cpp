// Packed variable-length batches (attnkit/varlen.hpp) on random packings, for the reference and the
// fast kernel on every supported target and dtype:
//   * each sequence's out, lse, probs and gradients are bitwise those of a call on that sequence
//     alone (the property that makes a packed call trustworthy);
//   * the fast kernel on a packed batch meets the accuracy rule of docs/semantics.md against the
//     float64 reference on the same packed batch.
// Packings include empty sequences on either side, single tokens, decode-shaped sequences (keys
// split) and prefill-shaped ones, with every option drawn at random.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "attnkit/attnkit.hpp"
#include "properties/comparison.hpp"
#include "properties/kernel_matrix.hpp"
#include "properties/random_problems.hpp"
#include "support/naive_f32.hpp"
#include "support/testing.hpp"

namespace attnkit::properties {
namespace {

class Varlen : public Properties {};

// The sequences' lengths and the offsets that pack them.
struct Packing {
  std::vector<int64_t> cu_q{0}, cu_k{0};
  int64_t max_n = 0, max_m = 0;
  int64_t batch() const { return static_cast<int64_t>(cu_q.size()) - 1; }
  int64_t n(int64_t b) const { return cu_q[static_cast<std::size_t>(b + 1)] - cu_q[static_cast<std::size_t>(b)]; }
  int64_t m(int64_t b) const { return cu_k[static_cast<std::size_t>(b + 1)] - cu_k[static_cast<std::size_t>(b)]; }
  int64_t q_start(int64_t b) const { return cu_q[static_cast<std::size_t>(b)]; }
  int64_t k_start(int64_t b) const { return cu_k[static_cast<std::size_t>(b)]; }
  void add(int64_t n, int64_t m) {
    cu_q.push_back(cu_q.back() + n);
    cu_k.push_back(cu_k.back() + m);
    max_n = std::max(max_n, n);
    max_m = std::max(max_m, m);
  }
};

// A packed problem: q [total_q, Hq, d_k], k [total_k, Hkv, d_k], v [total_k, Hkv, d_v] in the variant's
// dtype, and options with the memory they refer to.
struct PackedCase {
  Packing pack;
  int64_t Hq = 1, Hkv = 1, d_k = 1, d_v = 1;
  Tensor q, k, v;
  Tensor cu_q, cu_k;           // the offsets as i32 or i64 tensors
  std::optional<Tensor> mask;  // [B, Hq, max_n, max_m], [1, 1, max_n, max_m] or [max_n, max_m]
  std::vector<float> alibi_slopes;
  AttentionOptions settings;

  AttentionOptions options(Kernel kernel) const {
    AttentionOptions o = settings;
    if (mask) o.mask = mask->view();
    o.alibi_slopes = alibi_slopes;
    o.kernel = kernel;
    return o;
  }
  SequenceOffsets offsets() const { return {cu_q.view(), cu_k.view()}; }

  std::string describe() const {
    std::string d = "Hq=" + std::to_string(Hq) + " Hkv=" + std::to_string(Hkv) + " d_k=" + std::to_string(d_k) +
                    " d_v=" + std::to_string(d_v) + " lengths (n,m):";
    for (int64_t b = 0; b < pack.batch(); ++b) d += " (" + std::to_string(pack.n(b)) + "," + std::to_string(pack.m(b)) + ")";
    const char* causal[] = {"none", "top_left", "bottom_right"};
    d += std::string(" causal=") + causal[static_cast<int>(settings.causal)];
    if (settings.window.left >= 0 || settings.window.right >= 0)
      d += " window=(" + std::to_string(settings.window.left) + "," + std::to_string(settings.window.right) + ")";
    if (!alibi_slopes.empty()) d += " alibi";
    if (mask) d += std::string(" mask=") + std::string(dtype_name(mask->dtype())) + mask->view().shape_string();
    if (settings.softcap > 0) d += " softcap=" + std::to_string(settings.softcap);
    if (settings.dropout_p > 0) d += " dropout=" + std::to_string(settings.dropout_p);
    return d;
  }
};

Tensor offsets_tensor(const std::vector<int64_t>& offsets, DType dtype) {
  Tensor t(dtype, {static_cast<int64_t>(offsets.size())});
  for (std::size_t i = 0; i < offsets.size(); ++i) {
    if (dtype == DType::i32) {
      t.data<std::int32_t>()[i] = static_cast<std::int32_t>(offsets[i]);
    } else {
      t.data<std::int64_t>()[i] = offsets[i];
    }
  }
  return t;
}

Packing random_packing(Rng& rng) {
  Packing p;
  const int64_t B = rng.integer(1, kOptimisedBuild ? 6 : 4);
  bool decoded = false;  // at most one long decode-shaped sequence per packing (test time)
  for (int64_t b = 0; b < B; ++b) {
    switch (rng.integer(0, 5)) {
      case 0: p.add(0, rng.integer(0, 40)); break;  // no queries
      case 1: p.add(1, rng.integer(0, 60)); break;  // one token
      case 2: p.add(rng.integer(1, 40), 0); break;  // no keys: empty rows
      case 3: p.add(odd_size(rng, 1, 40), odd_size(rng, 1, 300)); break;
      case 4: p.add(odd_size(rng, 17, kOptimisedBuild ? 150 : 50), odd_size(rng, 17, kOptimisedBuild ? 400 : 120)); break;
      default:
        if (decoded) {
          p.add(odd_size(rng, 1, 16), odd_size(rng, 1, 200));
        } else {
          p.add(odd_size(rng, 1, 16), odd_size(rng, 1025, kOptimisedBuild ? 2300 : 1300));  // split keys
          decoded = true;
        }
    }
  }
  return p;
}

PackedCase random_packed_case(Rng& rng, const Variant& variant) {
  PackedCase c;
  c.pack = random_packing(rng);
  const Packing& p = c.pack;
  auto chance = [&](double probability) { return rng.uniform() < probability; };
  c.Hkv = rng.integer(1, 2);
  c.Hq = c.Hkv * rng.integer(1, 3);
  c.d_k = odd_size(rng, 1, 70);
  c.d_v = chance(0.5) ? c.d_k : odd_size(rng, 1, 70);
  auto values = [&](std::vector<int64_t> shape) {
    return Tensor::converted(random_values(rng, std::move(shape), variant.dtype, Distribution::gaussian).view(), variant.dtype);
  };
  c.q = values({p.cu_q.back(), c.Hq, c.d_k});
  c.k = values({p.cu_k.back(), c.Hkv, c.d_k});
  c.v = values({p.cu_k.back(), c.Hkv, c.d_v});
  c.cu_q = offsets_tensor(p.cu_q, chance(0.5) ? DType::i32 : DType::i64);
  c.cu_k = offsets_tensor(p.cu_k, chance(0.5) ? DType::i32 : DType::i64);

  AttentionOptions& o = c.settings;
  if (chance(0.5)) o.scale = 0.05 + 0.55 * rng.uniform();
  o.causal = std::array{Causal::none, Causal::top_left, Causal::bottom_right}[static_cast<std::size_t>(rng.integer(0, 2))];
  if (chance(0.35)) {
    o.window.left = chance(0.7) ? rng.integer(0, p.max_m) : -1;
    o.window.right = o.window.left < 0 || chance(0.5) ? rng.integer(0, p.max_m) : -1;
  }
  if (chance(0.35)) {
    for (int64_t h = 0; h < c.Hq; ++h) c.alibi_slopes.push_back(kSlopes[rng.integer(0, std::size(kSlopes) - 1)]);
  }
  if (chance(0.5)) {
    const int form = static_cast<int>(rng.integer(0, 2));
    const std::vector<int64_t> shape = form == 0   ? std::vector<int64_t>{p.batch(), c.Hq, p.max_n, p.max_m}
                                       : form == 1 ? std::vector<int64_t>{1, 1, p.max_n, p.max_m}
                                                   : std::vector<int64_t>{p.max_n, p.max_m};
    if (chance(0.5)) {
      Tensor mask(DType::boolean, shape);
      for (int64_t i = 0; i < mask.numel(); ++i) mask.data<bool>()[i] = chance(0.8);
      c.mask = std::move(mask);
    } else {
      Tensor mask(DType::f32, shape);
      for (int64_t i = 0; i < mask.numel(); ++i) mask.data<float>()[i] = chance(0.1) ? -INFINITY : static_cast<float>(grid_value(rng));
      c.mask = std::move(mask);
    }
  }
  if (chance(0.3)) o.softcap = std::array{2.5, 5.0, 20.0, 50.0}[static_cast<std::size_t>(rng.integer(0, 3))];
  if (chance(0.4)) {
    o.dropout_p = std::array{0.1, 0.3, 0.6}[static_cast<std::size_t>(rng.integer(0, 2))];
    o.seed = static_cast<std::uint64_t>(rng.integer(0, 1'000'000'000));
  }
  return c;
}

template <class Body>
void for_each_packed_case(const Variant& variant, std::uint64_t salt, Body body) {
  Rng rng(salt);
  for (int index = 0; index < cases_per_test(); ++index) {
    const PackedCase c = random_packed_case(rng, variant);
    SCOPED_TRACE("case " + std::to_string(index) + ": " + c.describe());
    body(c, rng);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// ---- views of one sequence ----

const std::byte* at_element(const Tensor& t, int64_t offset) {
  return static_cast<const std::byte*>(t.raw()) + offset * static_cast<int64_t>(dtype_size(t.dtype()));
}

// Rows [first, first + count) of a packed [total, H, D] tensor as the rank-4 [copies, H, count, D] a
// batched call takes: every entry is the sequence (stride 0), so entry copies − 1 has its index.
ConstTensorView sequence_as_batch(const Tensor& packed, int64_t first, int64_t count, int64_t copies) {
  const int64_t H = packed.shape()[1], D = packed.shape()[2];
  return ConstTensorView(at_element(packed, first * H * D), packed.dtype(), {copies, H, count, D}, {0, D, H * D, 1});
}

// A contiguous copy of a strided view of t's memory starting at element `offset`.
Tensor copy_of(const Tensor& t, int64_t offset, std::initializer_list<int64_t> sizes, std::initializer_list<int64_t> strides) {
  return Tensor::converted(ConstTensorView(at_element(t, offset), t.dtype(), sizes, strides), t.dtype());
}

// Sequence b's rows of a packed [total, H, D] output, as [H, count, D].
Tensor packed_rows(const Tensor& packed, int64_t first, int64_t count) {
  const int64_t H = packed.shape()[1], D = packed.shape()[2];
  return copy_of(packed, first * H * D, {H, count, D}, {D, H * D, 1});
}

// Entry e of a contiguous [E, H, S, D] output, as [H, S, D].
Tensor batch_entry_of(const Tensor& batched, int64_t e) {
  const auto& s = batched.shape();
  return copy_of(batched, e * s[1] * s[2] * s[3], {s[1], s[2], s[3]}, {s[2] * s[3], s[3], 1});
}

// The options of a call on sequence b alone, with `copies` batch entries that all read sequence b's
// slice of the mask; or, `in_place`, of a packed call in which sequence b is the only one that is not
// empty (the mask then keeps its batch dimension, cut to b's lengths).
AttentionOptions alone_options(const PackedCase& c, int64_t b, int64_t copies, Kernel kernel, bool in_place = false) {
  AttentionOptions o = c.options(kernel);
  if (!c.mask) return o;
  const Tensor& mask = *c.mask;
  const ConstTensorView full = mask.view();
  const int64_t n = c.pack.n(b), m = c.pack.m(b);
  if (mask.view().rank() == 2) {
    o.mask = ConstTensorView(mask.raw(), mask.dtype(), {n, m}, {full.stride(0), 1});
  } else if (in_place) {
    o.mask = ConstTensorView(mask.raw(), mask.dtype(), {mask.shape()[0], mask.shape()[1], n, m},
                             {full.stride(0), full.stride(1), full.stride(2), 1});
  } else {
    const int64_t entry = mask.shape()[0] == 1 ? 0 : b;
    o.mask = ConstTensorView(at_element(mask, entry * full.stride(0)), mask.dtype(), {copies, mask.shape()[1], n, m},
                             {0, full.stride(1), full.stride(2), 1});
  }
  return o;
}

struct PackedForward {
  Tensor out, lse, probs;
};

PackedForward run_packed_forward(const PackedCase& c, Kernel kernel, DType dtype, bool probs) {
  const Packing& p = c.pack;
  PackedForward r{testing::poisoned(dtype, {p.cu_q.back(), c.Hq, c.d_v}), testing::poisoned(DType::f32, {c.Hq, p.cu_q.back()}),
                  probs ? testing::poisoned(DType::f32, {p.batch(), c.Hq, p.max_n, p.max_m}) : Tensor()};
  const Tensor q = Tensor::converted(c.q.view(), dtype), k = Tensor::converted(c.k.view(), dtype),
               v = Tensor::converted(c.v.view(), dtype);
  ForwardExtras extras{r.lse.view(), std::nullopt};
  if (probs) extras.probs = r.probs.view();
  varlen_forward(q.view(), k.view(), v.view(), c.offsets(), r.out.view(), c.options(kernel), extras);
  return r;
}

// A window side near the top of int64 keeps every key on its side, per sequence, as −1 does:
// bitwise the same call (no visible key differs).
TEST_P(Varlen, WindowSidesUpToInt64MaxEqualUnbounded) {
  for_each_packed_case(variant(), 4, [&](const PackedCase& c, Rng& rng) {
    constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
    const int64_t other = rng.integer(0, 3);
    for (const auto& [side, unbounded] : std::vector<std::pair<Window, Window>>{
             {{kMax, other}, {-1, other}}, {{other, kMax - 1}, {other, -1}}, {{kMax, int64_t{1} << 62}, {-1, -1}}}) {
      SCOPED_TRACE("window=(" + std::to_string(side.left) + "," + std::to_string(side.right) + ")");
      PackedCase huge = c, plain = c;
      huge.settings.window = side;
      plain.settings.window = unbounded;
      const PackedForward got = run_packed_forward(huge, variant().kernel, variant().dtype, false);
      const PackedForward want = run_packed_forward(plain, variant().kernel, variant().dtype, false);
      ASSERT_TRUE(testing::bitwise_equal(got.out, want.out));
      ASSERT_TRUE(testing::bitwise_equal(got.lse, want.lse));
    }
  });
}

TEST_P(Varlen, EachSequenceIsBitwiseACallOnItAlone) {
  for_each_packed_case(variant(), 1, [&](const PackedCase& c, Rng& rng) {
    const Packing& p = c.pack;
    const bool probs = rng.uniform() < 0.5;
    const PackedForward packed = run_packed_forward(c, variant().kernel, variant().dtype, probs);
    for (int64_t b = 0; b < p.batch(); ++b) {
      SCOPED_TRACE("sequence " + std::to_string(b));
      const int64_t n = p.n(b), m = p.m(b), copies = b + 1;  // entry b: the same dropout stream
      Tensor out = testing::poisoned(variant().dtype, {copies, c.Hq, n, c.d_v});
      Tensor lse = testing::poisoned(DType::f32, {copies, c.Hq, n});
      Tensor alone_probs = testing::poisoned(DType::f32, {copies, c.Hq, n, m});
      ForwardExtras extras{lse.view(), std::nullopt};
      if (probs) extras.probs = alone_probs.view();
      forward(sequence_as_batch(c.q, p.q_start(b), n, copies), sequence_as_batch(c.k, p.k_start(b), m, copies),
              sequence_as_batch(c.v, p.k_start(b), m, copies), out.view(), alone_options(c, b, copies, variant().kernel),
              extras);
      expect_bitwise("out", variant(), packed_rows(packed.out, p.q_start(b), n), batch_entry_of(out, b));
      const int64_t total_q = p.cu_q.back();
      expect_bitwise("lse", variant(), copy_of(packed.lse, p.q_start(b), {c.Hq, n}, {total_q, 1}),
                     copy_of(lse, b * c.Hq * n, {c.Hq, n}, {n, 1}));
      if (!probs) continue;
      const int64_t row = p.max_m, head = p.max_n * p.max_m, entry = c.Hq * head;
      expect_bitwise("probs", variant(), copy_of(packed.probs, b * entry, {c.Hq, n, m}, {head, row, 1}),
                     batch_entry_of(alone_probs, b));
      // Past the sequence's own queries and keys, the padded probabilities are 0.
      const Tensor all = copy_of(packed.probs, b * entry, {c.Hq, p.max_n, p.max_m}, {head, row, 1});
      int64_t nonzero = 0;
      for (int64_t h = 0; h < c.Hq; ++h)
        for (int64_t i = 0; i < p.max_n; ++i)
          for (int64_t j = 0; j < p.max_m; ++j)
            if ((i >= n || j >= m) && all.data<float>()[(h * p.max_n + i) * p.max_m + j] != 0.0f) ++nonzero;
      EXPECT_EQ(nonzero, 0) << "probabilities past the sequence's lengths";
    }
  });
}

TEST_P(Varlen, EachSequencesGradientsAreBitwiseThoseOfACallOnItAlone) {
  for_each_packed_case(variant(), 2, [&](const PackedCase& c, Rng& rng) {
    const Packing& p = c.pack;
    const DType dtype = variant().dtype;
    const int64_t total_q = p.cu_q.back(), total_k = p.cu_k.back();
    const PackedForward fwd = run_packed_forward(c, variant().kernel, dtype, false);
    const Tensor d_out = Tensor::converted(random_values(rng, {total_q, c.Hq, c.d_v}, dtype, Distribution::gaussian).view(), dtype);
    Tensor dq = testing::poisoned(dtype, {total_q, c.Hq, c.d_k}), dk = testing::poisoned(dtype, {total_k, c.Hkv, c.d_k}),
           dv = testing::poisoned(dtype, {total_k, c.Hkv, c.d_v});
    varlen_backward(c.q.view(), c.k.view(), c.v.view(), c.offsets(), fwd.out.view(), d_out.view(), fwd.lse.view(), dq.view(),
                    dk.view(), dv.view(), c.options(variant().kernel));
    for (int64_t b = 0; b < p.batch(); ++b) {
      SCOPED_TRACE("sequence " + std::to_string(b));
      const int64_t n = p.n(b), m = p.m(b);
      Tensor dq_b = testing::poisoned(dtype, {1, c.Hq, n, c.d_k}), dk_b = testing::poisoned(dtype, {1, c.Hkv, m, c.d_k}),
             dv_b = testing::poisoned(dtype, {1, c.Hkv, m, c.d_v});
      if (c.settings.dropout_p == 0) {
        // A plain call on the sequence alone.
        const ConstTensorView lse_b(at_element(fwd.lse, p.q_start(b)), DType::f32, {1, c.Hq, n}, {0, total_q, 1});
        backward(sequence_as_batch(c.q, p.q_start(b), n, 1), sequence_as_batch(c.k, p.k_start(b), m, 1),
                 sequence_as_batch(c.v, p.k_start(b), m, 1), sequence_as_batch(fwd.out, p.q_start(b), n, 1),
                 sequence_as_batch(d_out, p.q_start(b), n, 1), lse_b, dq_b.view(), dk_b.view(), dv_b.view(),
                 alone_options(c, b, 1, variant().kernel));
      } else {
        // Dropout is keyed by the sequence's index: the same packed call with every other sequence
        // emptied, so that nothing else is packed with it.
        std::vector<int64_t> cu_q(p.cu_q.size(), 0), cu_k(p.cu_k.size(), 0);
        for (std::size_t e = static_cast<std::size_t>(b) + 1; e < cu_q.size(); ++e) cu_q[e] = n, cu_k[e] = m;
        const Tensor only_q = offsets_tensor(cu_q, DType::i64), only_k = offsets_tensor(cu_k, DType::i64);
        auto rows = [](const Tensor& t, int64_t first, int64_t count) {
          const int64_t H = t.shape()[1], D = t.shape()[2];
          return ConstTensorView(at_element(t, first * H * D), t.dtype(), {count, H, D}, {H * D, D, 1});
        };
        auto writable_rows = [](Tensor& t, int64_t count) {
          return TensorView(t.raw(), t.dtype(), {count, t.shape()[1], t.shape()[3]}, {t.shape()[3], count * t.shape()[3], 1});
        };
        const ConstTensorView lse_b(at_element(fwd.lse, p.q_start(b)), DType::f32, {c.Hq, n}, {total_q, 1});
        varlen_backward(rows(c.q, p.q_start(b), n), rows(c.k, p.k_start(b), m), rows(c.v, p.k_start(b), m),
                        {only_q.view(), only_k.view()}, rows(fwd.out, p.q_start(b), n), rows(d_out, p.q_start(b), n), lse_b,
                        writable_rows(dq_b, n), writable_rows(dk_b, m), writable_rows(dv_b, m),
                        alone_options(c, b, 1, variant().kernel, true));
      }
      expect_bitwise("dq", variant(), packed_rows(dq, p.q_start(b), n), batch_entry_of(dq_b, 0));
      expect_bitwise("dk", variant(), packed_rows(dk, p.k_start(b), m), batch_entry_of(dk_b, 0));
      expect_bitwise("dv", variant(), packed_rows(dv, p.k_start(b), m), batch_entry_of(dv_b, 0));
    }
  });
}

// The fast kernel on a packed batch against the float64 reference on the same batch: its RMS error
// is at most twice that of the naive float32 kernel (run per sequence) plus a floor.
TEST_P(Varlen, MeetsTheAccuracyRuleAgainstTheReference) {
  if (!variant().fast()) GTEST_SKIP() << "the accuracy rule holds the fast kernel to the reference";
  for_each_packed_case(variant(), 3, [&](const PackedCase& c, Rng&) {
    const Packing& p = c.pack;
    const PackedForward fast = run_packed_forward(c, Kernel::fast, variant().dtype, false);
    const PackedForward exact = run_packed_forward(c, Kernel::reference, DType::f64, false);
    Tensor naive = testing::poisoned(DType::f64, {p.cu_q.back(), c.Hq, c.d_v});
    const DType round_p = testing::forward_p_rounding(variant().target, variant().dtype, variant().dtype, variant().dtype);
    for (int64_t b = 0; b < p.batch(); ++b) {
      const int64_t n = p.n(b), m = p.m(b), copies = b + 1;
      auto batch = [&](const Tensor& t, int64_t first, int64_t count) {
        return Tensor::converted(sequence_as_batch(t, first, count, copies), t.dtype());
      };
      const Tensor out = testing::naive_f32_forward(batch(c.q, p.q_start(b), n), batch(c.k, p.k_start(b), m),
                                                    batch(c.v, p.k_start(b), m), alone_options(c, b, copies, Kernel::fast),
                                                    round_p);
      // Rounded to the storage dtype like the fast kernel's output, then placed in the packed rows.
      const Tensor rounded = Tensor::converted(Tensor::converted(out.view(), variant().dtype).view(), DType::f64);
      for (int64_t h = 0; h < c.Hq; ++h)
        for (int64_t i = 0; i < n; ++i)
          for (int64_t col = 0; col < c.d_v; ++col)
            naive.data<double>()[((p.q_start(b) + i) * c.Hq + h) * c.d_v + col] = testing::at4(rounded, b, h, i, col);
    }
    const Tensor fast_out = Tensor::converted(fast.out.view(), DType::f64);
    double largest = 1;
    for (int64_t i = 0; i < exact.out.numel(); ++i) largest = std::max(largest, std::fabs(exact.out.data<double>()[i]));
    const double fast_error = testing::rms_diff(fast_out, exact.out), naive_error = testing::rms_diff(naive, exact.out);
    EXPECT_LE(fast_error, 2 * naive_error + 1e-7 * largest) << "RMS errors: fast " << fast_error << ", naive f32 " << naive_error;
    for (int64_t i = 0; i < exact.lse.numel(); ++i) {
      const float want = exact.lse.data<float>()[i], got = fast.lse.data<float>()[i];
      if (std::isinf(want)) {
        ASSERT_EQ(got, want) << "lse " << i;
      } else {
        ASSERT_NEAR(got, want, 1e-5 * std::max(1.0f, std::fabs(want))) << "lse " << i;
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(AllKernels, Varlen, ::testing::ValuesIn(all_variants()), variant_param_name);

}  // namespace
}  // namespace attnkit::properties
