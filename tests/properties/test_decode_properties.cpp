// Property 6 (see test_properties.cpp): decoding equals the prefill.
//
//   * Through attnkit::forward: a causal bottom-right problem of n queries over m keys, cut into
//     random chunks of consecutive queries (single rows among them); each chunk [a, e) run alone over
//     the keys it may see, [0, m − n + e), still bottom-right aligned, gives rows a .. e − 1 of the
//     whole call. Chunks of <= 16 queries over > 1024 keys take the fast kernel's split-key path.
//   * Through the KV cache: sequences appended in random pieces to a cache (contiguous and paged, f32,
//     f16 and bf16 storage), then attend() with each sequence's last n tokens as queries, equal
//     attnkit::forward on the cache's own keys and values with Causal::bottom_right, bitwise: the
//     kernel reads the same numbers (converted to float32, or float64 for the reference) either way.
//     The same for quantized storage (attnkit/quantized.hpp) against the stored values.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "properties/comparison.hpp"
#include "properties/kernel_matrix.hpp"
#include "properties/random_problems.hpp"
#include "support/testing.hpp"

namespace attnkit::properties {
namespace {

// Consecutive chunks covering 0 .. n − 1: half of them single rows, the others up to n / 2 rows.
std::vector<std::pair<int64_t, int64_t>> random_chunks(Rng& rng, int64_t n) {
  std::vector<std::pair<int64_t, int64_t>> chunks;
  for (int64_t a = 0; a < n;) {
    const int64_t size = rng.uniform() < 0.5 ? 1 : rng.integer(1, std::max<int64_t>(1, n / 2));
    chunks.emplace_back(a, std::min(n, a + size));
    a = chunks.back().second;
  }
  return chunks;
}

TEST_P(Properties, DecodingChunkByChunkEqualsThePrefill) {
  ATTNKIT_TRACE_SEED();
  OptionSpace space;
  space.top_left = false;
  for_each_case(variant(), space, 6, [&](const Case& base, Rng& rng) {
    Case c = base;
    c.settings.causal = Causal::bottom_right;
    const Sizes& s = c.size;
    const Outcome whole = run(variant(), c);
    const Tensor whole_lse = lse_as4(whole.lse);
    const double logits = logit_scale(c, explicit_mask(c)), values = value_scale(c);
    const std::optional<Tensor> mask = c.mask ? std::optional<Tensor>(expanded_mask(c)) : std::nullopt;
    for (const auto& [a, e] : random_chunks(rng, s.n)) {
      // The chunk's queries keep their aligned positions i' = i + m − n: over a prefix of
      // m − n + e keys (none if that is negative), query a + t of the chunk is at t + prefix − (e − a).
      const int64_t prefix = std::max<int64_t>(0, s.m - s.n + e);
      SCOPED_TRACE("queries [" + std::to_string(a) + ", " + std::to_string(e) + ") over " + std::to_string(prefix) + " keys");
      Case chunk = c;
      chunk.size.n = e - a;
      chunk.size.m = prefix;
      chunk.q = row_range(c.q, a, e);
      const KeyOrder keys = key_range(s.B * s.Hkv, 0, prefix);
      chunk.k = reorder_keys(c.k, keys);
      chunk.v = reorder_keys(c.v, keys);
      if (mask) {
        const Tensor rows = row_range(*mask, a, e);
        chunk.mask = as_mask(reorder_mask_columns(rows, key_range(s.B * s.Hq, 0, prefix), 1, s.Hq), c.mask->dtype());
      }
      for (int64_t& length : chunk.key_lengths) length = std::min(length, prefix);
      const Outcome got = run(variant(), chunk);
      if (variant().fast()) {  // other tiles, maybe a key split: float32 sums in another order
        expect_close("out", variant(), got.out, row_range(whole.out, a, e), output_tolerance(variant(), values, logits), values);
        expect_close("lse", variant(), lse_as4(got.lse), row_range(whole_lse, a, e), lse_tolerance(variant(), logits));
      } else {  // the reference sums each row's keys in order; the whole's extra keys are masked, adding exactly 0
        expect_bitwise("out", variant(), got.out, row_range(whole.out, a, e));
        expect_bitwise("lse", variant(), lse_as4(got.lse), row_range(whole_lse, a, e));
      }
      if (::testing::Test::HasFailure()) return;  // one failing chunk says it; the rest would repeat it
    }
  });
}

// ---- through the KV cache ----

struct CacheProblem {
  int64_t Hq, Hkv, d_k, d_v, n;
  std::vector<Tensor> keys, values;  // per sequence, float64 [1, Hkv, length, d]
  Tensor q;                          // float64 [sequences, Hq, n, d_k], exact in the variant's dtype
  std::vector<float> slopes;
  CachedAttentionOptions options;    // scale, window, softcap (slopes set by the caller)
  Layout q_layout, out_layout;
};

// Three sequences; the shape family sets n and the lengths: one longer than 1024 keys with n <= 16
// (split_decode), n > 16 (prefill), or short (small). A sequence may be shorter than n.
CacheProblem random_cache_problem(Rng& rng, const Variant& variant, Shape shape) {
  CacheProblem p;
  p.Hkv = rng.integer(1, 2);
  p.Hq = p.Hkv * rng.integer(1, 3);
  p.d_k = odd_size(rng, 1, 70);
  p.d_v = rng.uniform() < 0.5 ? p.d_k : odd_size(rng, 1, 70);
  const int64_t longest = shape == Shape::split_decode ? odd_size(rng, 1025, kOptimisedBuild ? 2300 : 1300) : 0;
  p.n = shape == Shape::prefill ? odd_size(rng, 17, kOptimisedBuild ? 60 : 30) : odd_size(rng, 1, 16);
  std::vector<int64_t> lengths = {rng.integer(0, p.n), odd_size(rng, 1, shape == Shape::small ? 300 : 150),
                                  longest > 0 ? longest : odd_size(rng, 1, kOptimisedBuild ? 400 : 150)};
  for (int64_t length : lengths) {
    p.keys.push_back(testing::random_tensor(rng, {1, p.Hkv, length, p.d_k}, DType::f64, Distribution::with_outliers));
    p.values.push_back(testing::random_tensor(rng, {1, p.Hkv, length, p.d_v}));
  }
  p.q = random_values(rng, {static_cast<int64_t>(lengths.size()), p.Hq, p.n, p.d_k}, variant.dtype, Distribution::gaussian);
  if (rng.uniform() < 0.5) p.options.scale = 0.05 + 0.55 * rng.uniform();
  if (rng.uniform() < 0.35) p.options.window = {rng.integer(0, longest + 300), rng.uniform() < 0.5 ? -1 : rng.integer(0, 5)};
  if (rng.uniform() < 0.35)
    for (int64_t h = 0; h < p.Hq; ++h) p.slopes.push_back(kSlopes[rng.integer(0, std::size(kSlopes) - 1)]);
  if (rng.uniform() < 0.3) p.options.softcap = 5;
  p.q_layout = rng.uniform() < 0.5 ? Layout::sequence_major : Layout::contiguous;
  p.out_layout = rng.uniform() < 0.5 ? Layout::sequence_major : Layout::contiguous;
  return p;
}

// [1, H, S, D] seen as [H, S, D].
ConstTensorView without_batch(const Tensor& t) {
  const auto& s = t.shape();
  return ConstTensorView::contiguous(t.raw(), t.dtype(), {s[1], s[2], s[3]});
}

// Appends every sequence in random pieces, interleaved, so that a paged cache's blocks alternate.
std::vector<KVCache::SequenceId> fill_cache(KVCache& cache, const CacheProblem& p, Rng& rng) {
  const std::size_t count = p.keys.size();
  std::vector<KVCache::SequenceId> ids;
  std::vector<int64_t> done(count, 0);
  for (std::size_t s = 0; s < count; ++s) ids.push_back(cache.add_sequence());
  for (bool more = true; more;) {
    more = false;
    for (std::size_t s = 0; s < count; ++s) {
      const int64_t length = p.keys[s].shape()[2];
      if (done[s] == length) continue;
      const int64_t piece = std::min(length - done[s], rng.uniform() < 0.3 ? 1 : rng.integer(1, 400));
      const KeyOrder rows = key_range(p.Hkv, done[s], done[s] + piece);
      const Tensor keys = reorder_keys(p.keys[s], rows), values = reorder_keys(p.values[s], rows);
      cache.append(ids[s], without_batch(keys), without_batch(values));
      done[s] += piece;
      more = more || done[s] < length;
    }
  }
  return ids;
}

// A sequence's cached keys (or values) as float64 [1, Hkv, length, d]: the stored numbers exactly
// (keys() and values() give quantized storage's in float64).
Tensor cached_rows(const KVCache& cache, KVCache::SequenceId id, bool keys) {
  return Tensor::converted((keys ? cache.keys(id) : cache.values(id)).view().unsqueezed_to(4), DType::f64);
}

// attend() over a cache filled with p's sequences equals attnkit::forward with Causal::bottom_right on
// the cache's own stored keys and values, bitwise: the kernel reads the same numbers (rounded once
// to float32, or exactly in float64 for the reference) either way.
void expect_attend_equals_forward(const Variant& kernel, const CacheProblem& p, KVCacheLayout layout, int64_t block_size,
                                  DType key_storage, DType value_storage, Rng& rng,
                                  KeyQuantization key_quantization = KeyQuantization::per_token) {
  const int64_t sequences = static_cast<int64_t>(p.keys.size());
  const bool per_channel = key_quantization == KeyQuantization::per_channel;
  SCOPED_TRACE(std::string(layout == KVCacheLayout::paged ? "paged, blocks of " + std::to_string(block_size) : "contiguous") +
               ", " + std::string(dtype_name(key_storage)) + " keys" + (per_channel ? " per channel, " : ", ") +
               std::string(dtype_name(value_storage)) + " values");
  int64_t longest = 1;
  for (const Tensor& k : p.keys) longest = std::max(longest, k.shape()[2]);
  KVCacheConfig config{p.Hkv, p.d_k, p.d_v, sequences, longest, layout, block_size, 0, key_storage};
  config.value_dtype = value_storage;
  config.key_quantization = key_quantization;
  KVCache cache(config);
  const std::vector<KVCache::SequenceId> ids = fill_cache(cache, p, rng);
  // What the kernel computes in: float32 (float64 for the reference), except that a target that
  // rounds P takes such queries over such a cache in their own dtype (bf16 on a bf16-dot target, f16
  // on an f16 tile target; targets.hpp).
  const DType rounding = kernel.fast() ? testing::forward_p_rounding(kernel.target, kernel.dtype, key_storage, value_storage)
                                       : DType::f32;
  const DType compute = !kernel.fast() ? DType::f64 : rounding != DType::f32 ? rounding : DType::f32;

  const Stored q = store(p.q, kernel.dtype, p.q_layout);
  Stored out = poisoned_output({sequences, p.Hq, p.n, p.d_v}, kernel.dtype, p.out_layout);
  Tensor lse = testing::poisoned(DType::f32, {sequences, p.Hq, p.n});
  CachedAttentionOptions cached = p.options;
  cached.alibi_slopes = p.slopes;
  cached.kernel = kernel.kernel;
  cached.lse = lse.view();
  attend(cache, ids, q.view, out.view, cached);
  const Tensor decoded = Tensor::converted(out.view, DType::f64), decoded_lse = lse_as4(lse);

  for (int64_t s = 0; s < sequences; ++s) {
    SCOPED_TRACE("sequence " + std::to_string(s));
    // The same kernel on the cache's own stored keys and values, converted (rounded once) to the
    // dtype the kernel computes in; its output rounded to the variant's dtype as attend's is.
    const KVCache::SequenceId id = ids[static_cast<std::size_t>(s)];
    const Tensor k = Tensor::converted(cached_rows(cache, id, true).view(), compute);
    const Tensor v = Tensor::converted(cached_rows(cache, id, false).view(), compute);
    const Tensor qs = Tensor::converted(batch_entry(p.q, s).view(), compute);
    Tensor want = testing::poisoned(compute, {1, p.Hq, p.n, p.d_v}), want_lse = testing::poisoned(DType::f32, {1, p.Hq, p.n});
    AttentionOptions options;
    options.scale = p.options.scale;
    options.causal = Causal::bottom_right;
    options.window = p.options.window;
    options.alibi_slopes = p.slopes;
    options.softcap = p.options.softcap;
    options.kernel = kernel.kernel;
    forward(qs.view(), k.view(), v.view(), want.view(), options, ForwardExtras{want_lse.view(), std::nullopt});
    const Tensor want_out = Tensor::converted(Tensor::converted(want.view(), kernel.dtype).view(), DType::f64);
    expect_bitwise("out", kernel, batch_entry(decoded, s), want_out);
    expect_bitwise("lse", kernel, batch_entry(decoded_lse, s), lse_as4(want_lse));
  }
}

std::string describe(const CacheProblem& p, int index) {
  return "case " + std::to_string(index) + " (" + shape_name(shape_of_case(index)) + "): Hq=" + std::to_string(p.Hq) +
         " Hkv=" + std::to_string(p.Hkv) + " d_k=" + std::to_string(p.d_k) + " d_v=" + std::to_string(p.d_v) +
         " n=" + std::to_string(p.n) + " lengths " + std::to_string(p.keys[0].shape()[2]) + "," +
         std::to_string(p.keys[1].shape()[2]) + "," + std::to_string(p.keys[2].shape()[2]);
}

int64_t random_block_size(Rng& rng) { return std::array{1, 4, 16, 64}[static_cast<std::size_t>(rng.integer(0, 3))]; }

TEST_P(Properties, DecodingThroughTheKVCacheEqualsTheBottomRightForward) {
  ATTNKIT_TRACE_SEED();
  const Variant& kernel = variant();
  Rng rng(9);
  for (int index = 0; index < cases_per_test(); ++index) {
    const CacheProblem p = random_cache_problem(rng, kernel, shape_of_case(index));
    SCOPED_TRACE(describe(p, index));
    for (KVCacheLayout layout : {KVCacheLayout::contiguous, KVCacheLayout::paged})
      for (DType storage : {DType::f32, DType::f16, DType::bf16}) {
        expect_attend_equals_forward(kernel, p, layout, random_block_size(rng), storage, storage, rng);
        if (::testing::Test::HasFailure()) return;
      }
  }
}

// The same with quantized storage (attnkit/quantized.hpp: int8, int4, fp8), for keys and values
// alike and mixed with each other and with bf16, and keys quantised per channel: widths of whole
// blocks of 32 features, the rest as above.
TEST_P(Properties, DecodingThroughAQuantizedKVCacheEqualsTheForwardOnItsStoredValues) {
  ATTNKIT_TRACE_SEED();
  const Variant& kernel = variant();
  Rng rng(19);
  for (int index = 0; index < cases_per_test(); ++index) {
    CacheProblem p = random_cache_problem(rng, kernel, shape_of_case(index));
    p.d_k = kQuantBlock * rng.integer(1, 3);
    p.d_v = rng.uniform() < 0.5 ? p.d_k : kQuantBlock * rng.integer(1, 3);
    for (Tensor& k : p.keys) k = testing::random_tensor(rng, {1, p.Hkv, k.shape()[2], p.d_k}, DType::f64, Distribution::with_outliers);
    for (Tensor& v : p.values) v = testing::random_tensor(rng, {1, p.Hkv, v.shape()[2], p.d_v});
    p.q = random_values(rng, {static_cast<int64_t>(p.keys.size()), p.Hq, p.n, p.d_k}, kernel.dtype, Distribution::gaussian);
    SCOPED_TRACE(describe(p, index));
    const KVCacheLayout layout = rng.uniform() < 0.5 ? KVCacheLayout::contiguous : KVCacheLayout::paged;
    for (auto [keys, values] : {std::pair{DType::int8, DType::int8}, std::pair{DType::int4, DType::int4},
                                std::pair{DType::int8, DType::int4}, std::pair{DType::bf16, DType::int8},
                                std::pair{DType::int4, DType::f16}, std::pair{DType::fp8_e4m3, DType::fp8_e5m2},
                                std::pair{DType::fp8_e5m2, DType::fp8_e4m3}}) {
      expect_attend_equals_forward(kernel, p, layout, random_block_size(rng), keys, values, rng);
      if (::testing::Test::HasFailure()) return;
    }
    // Keys quantised per channel over groups of 32 tokens (paged blocks of a multiple of 32).
    for (auto [keys, values] : {std::pair{DType::int8, DType::int4}, std::pair{DType::int4, DType::bf16}}) {
      const int64_t block_size = rng.uniform() < 0.5 ? 32 : 64;
      expect_attend_equals_forward(kernel, p, layout, block_size, keys, values, rng, KeyQuantization::per_channel);
      if (::testing::Test::HasFailure()) return;
    }
  }
}

}  // namespace
}  // namespace attnkit::properties
