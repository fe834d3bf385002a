// Properties of attention that hold for any input, checked on random problems (from the test seed:
// ATTNKIT_TEST_SEED=<seed> reruns one) for every kernel: the float64 reference, and the fast kernel on
// every supported SIMD target with f32, bf16 and f16 storage (kernel_matrix.hpp). Each property
// compares one kernel with itself on two arrangements of the same numbers, so the two sides agree up
// to rounding (comparison.hpp states the tolerances), or bitwise where the kernel's arithmetic does not
// depend on the arrangement (batching).
//
//   1. permuting the keys and values together leaves O and lse unchanged;
//   2. adding a constant c to every logit of a row leaves O unchanged and adds c to lse;
//   3. masking a key equals deleting it;
//   4. batching equals looping over the batch (bitwise), also with dropout, whose stream is keyed by
//      the batch index;
//   5. splitting the keys in two and merging the halves with their lse equals the whole;
//   6. decoding equals the prefill (test_decode_properties.cpp);
//   7. the probabilities are non-negative, zero exactly at masked keys, sum to 1 per row (or are all
//      zero for a row that sees no key) and, without dropout, probs · V = O.
//
// Options that depend on key positions (causal, window, ALiBi, key_lengths) do not survive
// reordering or removing keys; where a property moves keys, the rearranged side gets them folded into
// an explicit additive mask (explicit_mask), rearranged with the keys, while the original side keeps
// them native.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "properties/comparison.hpp"
#include "properties/kernel_matrix.hpp"
#include "properties/random_problems.hpp"
#include "support/testing.hpp"

namespace attnkit::properties {
namespace {

[[maybe_unused]] const auto* const kDeviationLog = ::testing::AddGlobalTestEnvironment(new DeviationLog);

// ---- 1. permutation ----

TEST_P(Properties, PermutingKeysAndValuesTogetherLeavesTheOutputUnchanged) {
  ATTNKIT_TRACE_SEED();
  for_each_case(variant(), OptionSpace{}, 1, [&](const Case& c, Rng& rng) {
    const Sizes& s = c.size;
    KeyOrder order;  // its own permutation for each (batch entry, KV head)
    for (int64_t list = 0; list < s.B * s.Hkv; ++list) order.push_back(random_permutation(rng, s.m));
    const Tensor folded = explicit_mask(c);
    const Case permuted = with_explicit_mask(c, Tensor(c.q), reorder_keys(c.k, order), reorder_keys(c.v, order),
                                             reorder_mask_columns(folded, order, s.group(), s.Hkv));
    const Outcome want = run(variant(), c), got = run(variant(), permuted);
    const double logits = logit_scale(c, folded), values = value_scale(c);
    expect_close("out", variant(), got.out, want.out, output_tolerance(variant(), values, logits), values);
    expect_close("lse", variant(), got.lse, want.lse, lse_tolerance(variant(), logits));
  });
}

// ---- 2. a constant per row ----

TEST_P(Properties, AddingAConstantToEveryLogitOfARowShiftsOnlyTheLse) {
  ATTNKIT_TRACE_SEED();
  OptionSpace space;
  space.dropout = true;  // the same keys are dropped on both sides: (b, h, i, j) do not change
  for_each_case(variant(), space, 2, [&](const Case& c, Rng& rng) {
    const Sizes& s = c.size;
    std::vector<double> shift(static_cast<std::size_t>(s.B * s.Hq * s.n));
    for (double& x : shift) x = grid_value(rng, 8);
    // The shifted problem: the same options, with c_row added through an additive mask.
    Case shifted = c;
    if (!c.mask) {  // no mask against a mask that is one constant per row, broadcast over the keys
      Tensor per_row(DType::f64, {s.B, s.Hq, s.n, 1});
      std::copy(shift.begin(), shift.end(), per_row.data<double>());
      shifted.mask = as_mask(per_row, DType::f32);
    } else {  // M against M + c_row (a keep-mask reads as 0 where kept, −inf elsewhere)
      const bool keep = c.mask->dtype() == DType::boolean;
      Tensor values = expanded_mask(c);
      double* x = values.data<double>();
      for (int64_t e = 0; e < values.numel(); ++e) {
        const double row_shift = shift[static_cast<std::size_t>(e / s.m)];
        x[e] = keep ? (x[e] != 0 ? row_shift : -kInf) : x[e] + row_shift;  // −inf stays −inf
      }
      shifted.mask = as_mask(values, keep ? DType::f32 : c.mask->dtype());
    }
    const Outcome want = run(variant(), c), got = run(variant(), shifted);
    Tensor want_lse = Tensor::converted(want.lse.view(), DType::f64);
    for (int64_t r = 0; r < want_lse.numel(); ++r) want_lse.data<double>()[r] += shift[static_cast<std::size_t>(r)];

    const double logits = std::max(logit_scale(c, explicit_mask(c)), logit_scale(shifted, explicit_mask(shifted)));
    const double values = value_scale(c);
    expect_close("out", variant(), got.out, want.out, output_tolerance(variant(), values, logits), values);
    // want_lse carries the float32 rounding of the unshifted lse, half an ulp at its own magnitude.
    Tensor unshifted_rounding(DType::f64, want_lse.shape());
    for (int64_t r = 0; r < want_lse.numel(); ++r)
      unshifted_rounding.data<double>()[r] = ulp(want.lse.data<float>()[r], DType::f32) / 2;
    expect_close("lse", variant(), got.lse, want_lse, lse_tolerance(variant(), logits), 1, &unshifted_rounding);
  });
}

// ---- 3. masking equals deleting ----

enum class Deletion { keep_mask_false, additive_minus_inf, key_lengths };

TEST_P(Properties, MaskingAKeyEqualsDeletingIt) {
  ATTNKIT_TRACE_SEED();
  for_each_case(variant(), OptionSpace{}, 3, [&](const Case& base, Rng& rng) {
    const Sizes& s = base.size;
    // How the keys are masked, compatible with the mask the problem already has.
    std::vector<Deletion> ways = {Deletion::key_lengths};
    if (!base.mask || base.mask->dtype() == DType::boolean) ways.push_back(Deletion::keep_mask_false);
    if (!base.mask || base.mask->dtype() != DType::boolean) ways.push_back(Deletion::additive_minus_inf);
    const Deletion way = ways[static_cast<std::size_t>(rng.integer(0, static_cast<int64_t>(ways.size()) - 1))];
    SCOPED_TRACE("masked by " + std::string(way == Deletion::key_lengths       ? "key_lengths"
                                            : way == Deletion::keep_mask_false ? "a keep-mask false"
                                                                               : "an additive -inf"));

    // deleted[b]: the keys masked for every query and head of batch entry b.
    Case c = base;
    std::vector<std::vector<bool>> deleted(static_cast<std::size_t>(s.B), std::vector<bool>(static_cast<std::size_t>(s.m)));
    if (way == Deletion::key_lengths) {
      c.key_lengths.clear();
      for (int64_t b = 0; b < s.B; ++b) {
        c.key_lengths.push_back(rng.integer(0, s.m));
        for (int64_t j = c.key_lengths.back(); j < s.m; ++j) deleted[static_cast<std::size_t>(b)][static_cast<std::size_t>(j)] = true;
      }
    } else {
      const bool keep = way == Deletion::keep_mask_false;
      const double fraction = std::array{0.05, 0.3, 1.0}[static_cast<std::size_t>(rng.integer(0, 2))];
      Tensor values(DType::f64, {s.B, s.Hq, s.n, s.m});
      if (c.mask) {
        values = expanded_mask(c);
      } else {
        std::fill_n(values.data<double>(), values.numel(), keep ? 1.0 : 0.0);
      }
      for (int64_t b = 0; b < s.B; ++b)
        for (int64_t j = 0; j < s.m; ++j) {
          if (rng.uniform() >= fraction) continue;
          deleted[static_cast<std::size_t>(b)][static_cast<std::size_t>(j)] = true;
          for (int64_t h = 0; h < s.Hq; ++h)
            for (int64_t i = 0; i < s.n; ++i) values.data<double>()[((b * s.Hq + h) * s.n + i) * s.m + j] = keep ? 0 : -kInf;
        }
      c.mask = as_mask(values, keep ? DType::boolean : c.mask ? c.mask->dtype() : DType::f32);
    }

    const Outcome whole = run(variant(), c);
    const Tensor folded = explicit_mask(c);
    const double logits = logit_scale(c, folded), values = value_scale(c);
    const Tensor whole_lse = lse_as4(whole.lse);
    for (int64_t b = 0; b < s.B; ++b) {
      SCOPED_TRACE("batch entry " + std::to_string(b));
      std::vector<int64_t> kept;
      for (int64_t j = 0; j < s.m; ++j)
        if (!deleted[static_cast<std::size_t>(b)][static_cast<std::size_t>(j)]) kept.push_back(j);
      const KeyOrder order(static_cast<std::size_t>(s.Hkv), kept);
      const Case without = with_explicit_mask(c, batch_entry(c.q, b), reorder_keys(batch_entry(c.k, b), order),
                                              reorder_keys(batch_entry(c.v, b), order),
                                              reorder_mask_columns(batch_entry(folded, b), order, s.group(), s.Hkv));
      const Outcome got = run(variant(), without);
      expect_close("out", variant(), got.out, batch_entry(whole.out, b), output_tolerance(variant(), values, logits), values);
      expect_close("lse", variant(), lse_as4(got.lse), batch_entry(whole_lse, b), lse_tolerance(variant(), logits));
    }
  });
}

// ---- 4. batching equals looping ----

// Entry b of a view's first dimension, as a view of size `copies` there whose entries all read entry b
// (stride 0); copies = 1 is a plain slice.
template <class View>
View batch_view(const View& t, int64_t b, int64_t copies = 1) {
  using Byte = std::conditional_t<std::is_same_v<View, TensorView>, std::byte, const std::byte>;
  auto* base = static_cast<Byte*>(t.data()) + b * t.stride(0) * static_cast<int64_t>(dtype_size(t.dtype()));
  int64_t sizes[kMaxViewRank], strides[kMaxViewRank];
  for (int d = 0; d < t.rank(); ++d) {
    sizes[d] = d == 0 ? copies : t.size(d);
    strides[d] = d == 0 && copies > 1 ? 0 : t.stride(d);
  }
  return View(base, t.dtype(), sizes, strides, t.rank());
}

// The options of entry b alone (repeated `copies` times): the mask's entry if it has a batch
// dimension, that entry's key length.
AttentionOptions entry_options(const Case& c, int64_t b, std::vector<int64_t>& key_lengths, int64_t copies = 1) {
  AttentionOptions o = c.options();
  if (c.mask && c.mask->rank() == 4 && c.mask->shape()[0] > 1) o.mask = batch_view(c.mask->view(), b, copies);
  if (!c.key_lengths.empty()) {
    key_lengths.assign(static_cast<std::size_t>(copies), c.key_lengths[static_cast<std::size_t>(b)]);
    o.key_lengths = key_lengths;
  }
  return o;
}

// The kernels compute each (batch entry, KV head) on its own, with a plan that does not depend on B,
// so looping is bitwise equal to batching: asserted bitwise, on the stored bits of every output.
TEST_P(Properties, BatchingEqualsLoopingOverTheBatch) {
  ATTNKIT_TRACE_SEED();
  OptionSpace space;
  space.min_batch = 2;
  for_each_case(variant(), space, 4, [&](const Case& c, Rng& rng) {
    const Sizes& s = c.size;
    const DType probs_dtype = variant().fast() ? DType::f32 : DType::f64;
    const Stored q = store(c.q, variant().dtype, c.q_layout), k = store(c.k, variant().dtype, c.k_layout),
                 v = store(c.v, variant().dtype, c.v_layout);
    struct Outputs {
      Stored out;
      Tensor lse, probs;
    };
    auto poisoned_outputs = [&] {
      return Outputs{poisoned_output({s.B, s.Hq, s.n, s.d_v}, variant().dtype, c.out_layout),
                     testing::poisoned(DType::f32, {s.B, s.Hq, s.n}), testing::poisoned(probs_dtype, {s.B, s.Hq, s.n, s.m})};
    };
    Outputs batched = poisoned_outputs(), looped = poisoned_outputs();
    AttentionOptions options = c.options();
    options.kernel = variant().kernel;
    forward(q.view, k.view, v.view, batched.out.view, options, ForwardExtras{batched.lse.view(), batched.probs.view()});
    // In a random order: no entry's call may depend on an earlier one.
    for (int64_t b : random_permutation(rng, s.B)) {
      std::vector<int64_t> key_lengths;
      AttentionOptions entry = entry_options(c, b, key_lengths);
      entry.kernel = variant().kernel;
      forward(batch_view(q.view, b), batch_view(k.view, b), batch_view(v.view, b), batch_view(looped.out.view, b), entry,
              ForwardExtras{batch_view(looped.lse.view(), b), batch_view(looped.probs.view(), b)});
    }
    expect_bitwise("out", variant(), looped.out.memory, batched.out.memory);
    expect_bitwise("lse", variant(), looped.lse, batched.lse);
    expect_bitwise("probs", variant(), looped.probs, batched.probs);
  });
}

// Dropout keys its stream on (seed, batch, head, query, key) (docs/semantics.md), so entry b alone is
// not a batch-1 call (that would be keyed 0) but the last entry of a call that repeats it b + 1 times
// through a zero batch stride. Bitwise, like batching without dropout. A check of the premise (that
// the stream does depend on b) follows.
TEST_P(Properties, BatchingEqualsLoopingWithDropoutKeyedByTheBatchIndex) {
  ATTNKIT_TRACE_SEED();
  OptionSpace space;
  space.dropout = true;
  space.min_batch = 2;
  for_each_case(variant(), space, 8, [&](const Case& base, Rng& rng) {
    Case c = base;
    if (c.settings.dropout_p == 0) c.settings.dropout_p = 0.3, c.settings.seed = static_cast<std::uint64_t>(rng.integer(0, 1 << 30));
    const Sizes& s = c.size;
    const Outcome batched = run(variant(), c);
    const Stored q = store(c.q, variant().dtype, c.q_layout), k = store(c.k, variant().dtype, c.k_layout),
                 v = store(c.v, variant().dtype, c.v_layout);
    for (int64_t b = 0; b < s.B; ++b) {
      SCOPED_TRACE("batch entry " + std::to_string(b));
      const int64_t copies = b + 1;
      Tensor out = testing::poisoned(variant().dtype, {copies, s.Hq, s.n, s.d_v});
      Tensor lse = testing::poisoned(DType::f32, {copies, s.Hq, s.n});
      std::vector<int64_t> key_lengths;
      AttentionOptions entry = entry_options(c, b, key_lengths, copies);
      entry.kernel = variant().kernel;
      forward(batch_view(q.view, b, copies), batch_view(k.view, b, copies), batch_view(v.view, b, copies), out.view(), entry,
              ForwardExtras{lse.view(), std::nullopt});
      const Tensor looped = Tensor::converted(out.view(), DType::f64);
      expect_bitwise("out", variant(), batch_entry(looped, b), batch_entry(batched.out, b));
      expect_bitwise("lse", variant(), batch_entry(lse_as4(lse), b), batch_entry(lse_as4(batched.lse), b));
    }
    // The premise, that the stream depends on the batch index: one entry repeated twice, with q = 0 and
    // no other option (equal weights, so each output is the mean of its kept values: >= 64 keep
    // decisions per row, all equal by chance with probability < 1e-5), gives two different outputs.
    if (s.m < 64) return;
    const Stored zero_q = store(Tensor(DType::f64, c.q.shape()), variant().dtype, Layout::contiguous);
    Tensor twice = testing::poisoned(variant().dtype, {2, s.Hq, s.n, s.d_v});
    AttentionOptions plain;
    plain.dropout_p = c.settings.dropout_p, plain.seed = c.settings.seed, plain.kernel = variant().kernel;
    forward(batch_view(zero_q.view, 0, 2), batch_view(k.view, 0, 2), batch_view(v.view, 0, 2), twice.view(), plain);
    const Tensor both = Tensor::converted(twice.view(), DType::f64);
    EXPECT_FALSE(testing::bitwise_equal(batch_entry(both, 0), batch_entry(both, 1)))
        << "two entries with the same inputs gave the same output under dropout: the stream ignores the batch index";
  });
}

// ---- 5. split and merge ----

// Results over two disjoint key sets, merged: O = (e^L1 · O1 + e^L2 · O2) / (e^L1 + e^L2) and
// lse = log(e^L1 + e^L2), computed around the larger lse. A part that sees no key (lse = −inf) weighs
// nothing; both such: O = 0, lse = −inf.
struct Merged {
  Tensor out, lse;  // float64 [B, Hq, n, d_v] and [B, Hq, n, 1]
  // Per element of out: how far the parts' storage rounding (half an ulp of `storage` at |O1| and |O2|,
  // weighted like them) can move it. |O1|, |O2| may exceed |O| (they cancel), so this is not an ulp of O.
  Tensor part_rounding;
};
Merged merge(const Outcome& first, const Outcome& second, DType storage) {
  const auto& s = first.out.shape();
  const int64_t rows = s[0] * s[1] * s[2], width = s[3];
  Merged m{Tensor(DType::f64, s), Tensor(DType::f64, {s[0], s[1], s[2], 1}), Tensor(DType::f64, s)};
  for (int64_t r = 0; r < rows; ++r) {
    const double l1 = first.lse.data<float>()[r], l2 = second.lse.data<float>()[r];
    const double top = std::max(l1, l2);
    double* o = m.out.data<double>() + r * width;
    if (top == -kInf) {
      std::fill(o, o + width, 0.0);
      m.lse.data<double>()[r] = -kInf;
      continue;
    }
    const double w1 = std::exp(l1 - top), w2 = std::exp(l2 - top);  // 0 for a part with lse = −inf
    for (int64_t c = 0; c < width; ++c) {
      const double o1 = first.out.data<double>()[r * width + c], o2 = second.out.data<double>()[r * width + c];
      o[c] = (w1 * o1 + w2 * o2) / (w1 + w2);
      m.part_rounding.data<double>()[r * width + c] = (w1 * ulp(o1, storage) + w2 * ulp(o2, storage)) / (2 * (w1 + w2));
    }
    m.lse.data<double>()[r] = top + std::log(w1 + w2);
  }
  return m;
}

TEST_P(Properties, SplittingTheKeysAndMergingWithTheLseEqualsTheWhole) {
  ATTNKIT_TRACE_SEED();
  for_each_case(variant(), OptionSpace{}, 5, [&](const Case& c, Rng& rng) {
    const Sizes& s = c.size;
    const double u = rng.uniform();
    const int64_t split = u < 0.15 ? 0 : u < 0.3 ? s.m : rng.integer(0, s.m);
    SCOPED_TRACE("keys split at " + std::to_string(split));
    const Tensor folded = explicit_mask(c);
    auto part = [&](int64_t begin, int64_t end) {
      const KeyOrder keys = key_range(s.B * s.Hkv, begin, end);
      return run(variant(), with_explicit_mask(c, Tensor(c.q), reorder_keys(c.k, keys), reorder_keys(c.v, keys),
                                               reorder_mask_columns(folded, keys, s.group(), s.Hkv)));
    };
    const Outcome whole = run(variant(), c), first = part(0, split), second = part(split, s.m);
    const Merged merged = merge(first, second, variant().dtype);

    // Besides the kernel's own rounding (both sides' tolerances), the merge weighs the parts by their
    // float32 lse: an error of one float32 ulp of |lse| in L1 − L2 moves the weights by up to that
    // much (σ' <= 1/4, twice), and O by that times |O1 − O2| <= 2 max|V|.
    double largest_lse = 0;
    for (const Tensor* lse : {&first.lse, &second.lse})
      for (int64_t r = 0; r < lse->numel(); ++r)
        if (std::isfinite(lse->data<float>()[r])) largest_lse = std::max(largest_lse, std::fabs(double{lse->data<float>()[r]}));
    const double logits = logit_scale(c, folded), values = value_scale(c), lse_ulp = ulp(largest_lse, DType::f32);
    Tolerance out_tolerance = output_tolerance(variant(), values, logits);
    out_tolerance.absolute += lse_ulp * values;
    Tolerance lse_tol = lse_tolerance(variant(), logits);
    lse_tol.absolute += lse_ulp;
    expect_close("out", variant(), merged.out, whole.out, out_tolerance, values, &merged.part_rounding);
    expect_close("lse", variant(), merged.lse, lse_as4(whole.lse), lse_tol);
  });
}

// ---- 7. probabilities ----

double unit_roundoff(DType dtype) { return ulp(1.0, dtype) / 2; }

TEST_P(Properties, ProbabilitiesAreNonNegativeSumToOneAndReproduceTheOutput) {
  ATTNKIT_TRACE_SEED();
  OptionSpace space;
  space.dropout = true;  // probs are the weights before dropout: all but probs · V = O still hold
  for_each_case(variant(), space, 7, [&](const Case& c, Rng& rng) {
    const Sizes& s = c.size;
    const DType probs_dtype = std::array{DType::f64, DType::f32, DType::f16, DType::bf16}[static_cast<std::size_t>(rng.integer(0, 3))];
    SCOPED_TRACE("probs stored as " + std::string(dtype_name(probs_dtype)));
    const Outcome r = run(variant(), c, probs_dtype);
    const Tensor folded = explicit_mask(c);
    const double logits = logit_scale(c, folded), values = value_scale(c);

    Tensor sums(DType::f64, {s.B, s.Hq, s.n, 1}), want_sums(DType::f64, {s.B, s.Hq, s.n, 1});
    Tensor weighted(DType::f64, {s.B, s.Hq, s.n, s.d_v});  // probs · V
    int64_t negative = 0, leaked = 0, wrong_lse = 0;        // p < 0 (or NaN); p != 0 at a masked key;
                                                            // lse = −inf exactly when the row sees no key
    for (int64_t b = 0; b < s.B; ++b)
      for (int64_t h = 0; h < s.Hq; ++h)
        for (int64_t i = 0; i < s.n; ++i) {
          const int64_t row = (b * s.Hq + h) * s.n + i;
          const double* p = r.probs.data<double>() + row * s.m;
          const double* visible = folded.data<double>() + row * s.m;
          double sum = 0;
          bool sees_a_key = false;
          for (int64_t j = 0; j < s.m; ++j) {
            sees_a_key = sees_a_key || visible[j] != -kInf;
            negative += !(p[j] >= 0);
            leaked += visible[j] == -kInf && p[j] != 0;
            sum += p[j];
            const double* v_row = row_of(c.v, b, h / s.group(), j);
            for (int64_t e = 0; e < s.d_v; ++e) weighted.data<double>()[row * s.d_v + e] += p[j] * v_row[e];
          }
          sums.data<double>()[row] = sum;
          // A row that sees no key has lse = −inf and probabilities exactly 0 (checked by `leaked`).
          want_sums.data<double>()[row] = sees_a_key ? 1.0 : 0.0;
          wrong_lse += (r.lse.data<float>()[row] == -INFINITY) == sees_a_key;
        }
    EXPECT_EQ(negative, 0) << "negative or NaN probabilities";
    EXPECT_EQ(leaked, 0) << "nonzero probabilities at masked keys";
    EXPECT_EQ(wrong_lse, 0) << "rows whose lse is -inf although they see a key, or finite although they see none";
    // Each probability rounds to probs_dtype (relative unit roundoff u, so u on the sum) on top of the
    // kernel's own error in exp(logit − lse), which is that of lse.
    const double sum_error = lse_tolerance(variant(), logits).absolute + unit_roundoff(probs_dtype);
    const std::string stored_as = " (probs " + std::string(dtype_name(probs_dtype)) + ")";
    expect_close("row sums" + stored_as, variant(), sums, want_sums, {sum_error, 0, DType::f64});
    if (c.settings.dropout_p == 0) {
      Tolerance tolerance = output_tolerance(variant(), values, logits);
      tolerance.absolute += sum_error * values;
      expect_close("probs.V" + stored_as, variant(), weighted, r.out, tolerance, values);
    }
  });
}

INSTANTIATE_TEST_SUITE_P(AllKernels, Properties, ::testing::ValuesIn(all_variants()), variant_param_name);

}  // namespace
}  // namespace attnkit::properties
