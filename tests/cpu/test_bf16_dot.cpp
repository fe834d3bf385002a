// The bf16-dot targets (include/attnkit/targets.hpp): the portable model of vdpbf16ps
// (src/cpu/simd/bf16_dot_model.hpp) on the cases that define it, the emulated target's vector version
// and, where the CPU has AVX512_BF16, the instruction itself against the model bit for bit; then the
// forward kernel of every supported bf16-dot target on bf16 inputs: P is rounded to bf16 before P·V
// (its error is that of the naive kernel that rounds P the same way, and far above one that does not),
// and the accuracy rule holds against that naive kernel.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "attnkit/targets.hpp"
#include "cpu/bf16_bits.hpp"
#include "cpu/bf16_dot_lanes.hpp"
#include "cpu/geometry.hpp"
#include "cpu/kernels.hpp"
#include "cpu/simd/bf16_dot_model.hpp"
#include "support/naive_f32.hpp"
#include "support/target_twins.hpp"
#include "support/testing.hpp"

namespace attnkit {
namespace {

using cpu::dot_bf16_pair;
using cpu::float_to_bf16_bits;

using testing::pair;
using testing::same_bits_or_both_nan;

bool supported(Target t) {
  const std::vector<Target> s = supported_targets();
  return std::find(s.begin(), s.end(), t) != s.end();
}

// The bf16-dot targets this CPU runs, but those whose bf16 kernels another of them runs already
// (an f16 tile target's are its bf16 tile twin's), each left out with a line saying so.
std::vector<Target> bf16_dot_targets_here() {
  std::vector<Target> targets;
  for (Target t : supported_targets()) {
    if (!target_uses_bf16_dot(t)) continue;
    if (const std::optional<Target> same = testing::same_kernels_as(t, DType::bf16)) {
      std::printf("[ note ] target %s not run: its bf16 calls run %s's kernels, run here\n", target_name(t), target_name(*same));
      continue;
    }
    targets.push_back(t);
  }
  return targets;
}

// ---- the model ----

TEST(Bf16DotModel, AddsTheHighProductFirst) {
  // 2^24 + 1 (high pair) is a tie that rounds back to 2^24, then − 2^24 (low pair) leaves 0. Adding the
  // low product first would give 1.
  EXPECT_EQ(dot_bf16_pair(0x1p24f, pair(-0x1p24f, 1.0f), pair(1.0f, 1.0f)), 0.0f);
  EXPECT_EQ(dot_bf16_pair(0.0f, pair(3.0f, 2.0f), pair(5.0f, 7.0f)), 29.0f);  // 2·7 + 3·5
}

TEST(Bf16DotModel, ReadsDenormalInputsAsZeroAndFlushesDenormalResults) {
  const std::uint32_t denormal_pair = 0x00010001;  // the smallest bf16 denormal, twice
  EXPECT_EQ(dot_bf16_pair(0.0f, denormal_pair, pair(0x1p100f, 0x1p100f)), 0.0f);
  EXPECT_EQ(dot_bf16_pair(0.0f, pair(0.0f, 0x1p-70f), pair(0.0f, 0x1p-70f)), 0.0f) << "2^−140, a denormal, flushed";
  EXPECT_EQ(dot_bf16_pair(0.0f, pair(0.0f, 0x1p-60f), pair(0.0f, 0x1p-60f)), 0x1p-120f) << "a normal product stays";
  EXPECT_EQ(dot_bf16_pair(0x1p-140f, 0, 0), 0.0f) << "a denormal accumulator is read as zero";
  EXPECT_EQ(dot_bf16_pair(0x1p-126f, 0, 0), 0x1p-126f) << "the smallest normal stays";
}

TEST(Bf16DotModel, RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16_bits(1.0f + 0x1p-8f), float_to_bf16_bits(1.0f));             // a tie: to even
  EXPECT_EQ(float_to_bf16_bits(1.0f + 0x1p-8f + 0x1p-20f), float_to_bf16_bits(1.0f + 0x1p-7f));  // above
  EXPECT_EQ(float_to_bf16_bits(1.0f + 3 * 0x1p-8f), float_to_bf16_bits(1.0f + 0x1p-6f));  // a tie: to even
  EXPECT_EQ(float_to_bf16_bits(-2.5f), 0xC020);
}

// ---- vector versions against the model ----

// Random lanes: any bf16 bit patterns (denormals, ±inf and NaN included) and accumulators spanning
// denormals to large values.
struct Lanes {
  float acc[testing::kDotLanes];
  std::uint32_t a[testing::kDotLanes], b[testing::kDotLanes];
};
Lanes random_lanes(testing::Rng& rng, int round) {
  Lanes l;
  for (int i = 0; i < testing::kDotLanes; ++i) {
    auto bits16 = [&] {
      // Mostly ordinary numbers near 1, sometimes any pattern at all.
      if (rng.uniform() < 0.3) return static_cast<std::uint32_t>(rng.integer(0, 0xFFFF));
      return std::uint32_t{float_to_bf16_bits(static_cast<float>(rng.normal() * std::ldexp(1.0, static_cast<int>(rng.integer(-30, 30)))))};
    };
    l.a[i] = bits16() | bits16() << 16;
    l.b[i] = bits16() | bits16() << 16;
    l.acc[i] = round % 7 == 0 ? static_cast<float>(rng.normal() * 0x1p-130) : static_cast<float>(rng.normal() * 100);
  }
  return l;
}

using DotLanes = void (*)(const float*, const std::uint32_t*, const std::uint32_t*, float*);
using RoundLanes = void (*)(const float*, float*);
using PairLanes = void (*)(const float*, std::uint32_t*);
using RowPairLanes = void (*)(const float*, const float*, std::uint32_t*);

void expect_matches_model(DotLanes dot, RoundLanes round_bf16, PairLanes round_into_pairs, RowPairLanes store_row_pairs) {
  testing::Rng rng(0xBF16);
  std::int64_t compared = 0;
  for (int round = 0; round < 20000; ++round) {
    const Lanes l = random_lanes(rng, round);
    float got[testing::kDotLanes];
    dot(l.acc, l.a, l.b, got);
    for (int i = 0; i < testing::kDotLanes; ++i, ++compared) {
      const float want = dot_bf16_pair(l.acc[i], l.a[i], l.b[i]);
      ASSERT_TRUE(same_bits_or_both_nan(got[i], want))
          << "lane " << i << ": acc " << l.acc[i] << ", a 0x" << std::hex << l.a[i] << ", b 0x" << l.b[i] << std::dec
          << ": got " << got[i] << ", the model " << want;
    }
    float in[testing::kDotLanes], rounded[testing::kDotLanes];
    for (int i = 0; i < testing::kDotLanes; ++i) in[i] = static_cast<float>(rng.normal() * std::ldexp(1.0, static_cast<int>(rng.integer(-140, 120))));
    round_bf16(in, rounded);
    for (int i = 0; i < testing::kDotLanes; ++i) {
      // Denormal inputs read as zero, as vcvtne2ps2bf16 and vdpbf16ps read them.
      const std::uint32_t want = std::uint32_t{float_to_bf16_bits(cpu::flush_denormal(in[i]))} << 16;
      float want_f;
      std::memcpy(&want_f, &want, sizeof want_f);
      ASSERT_TRUE(same_bits_or_both_nan(rounded[i], want_f)) << in[i];
    }
    // P rounded into pairs before P·V: as vcvtne2ps2bf16, denormal inputs read as zero, then rounded
    // to nearest even; inputs near 2^−126 (denormal, or rounding up to it), ties and specials.
    float row[2 * testing::kDotLanes];
    for (int i = 0; i < 2 * testing::kDotLanes; ++i) {
      const double u = rng.uniform();
      if (u < 0.1) {
        row[i] = static_cast<float>(rng.uniform() * 0x1p-126);  // denormal, or just below the smallest normal
      } else if (u < 0.15) {
        const float specials[] = {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(), 0.0f, -0.0f};
        row[i] = specials[rng.integer(0, 3)];
      } else if (u < 0.3) {
        row[i] = 1.0f + static_cast<float>(rng.integer(0, 255)) * 0x1p-8f + 0x1p-9f;  // a tie below bf16's ulp at 1
      } else {
        row[i] = static_cast<float>(rng.uniform() * std::ldexp(1.0, static_cast<int>(rng.integer(-130, 2))));
      }
    }
    std::uint32_t pairs[testing::kDotLanes];
    round_into_pairs(row, pairs);
    for (int j = 0; j < testing::kDotLanes; ++j) {
      for (int e = 0; e < 2; ++e) {
        const float x = row[2 * j + e];
        const std::uint16_t got_bits = static_cast<std::uint16_t>(pairs[j] >> (16 * e));
        const std::uint16_t want_bits = float_to_bf16_bits(cpu::flush_denormal(x));
        ASSERT_TRUE(got_bits == want_bits || (std::isnan(x) && (got_bits & 0x7F80) == 0x7F80 && (got_bits & 0x7F) != 0))
            << "element " << 2 * j + e << " = " << x << ": got 0x" << std::hex << got_bits << ", want 0x" << want_bits;
      }
    }
    // Two rows of bf16 values (any bit pattern in the upper half) paired lane by lane.
    float even[testing::kDotLanes], odd[testing::kDotLanes];
    std::uint16_t even_bits[testing::kDotLanes], odd_bits[testing::kDotLanes];
    for (int i = 0; i < testing::kDotLanes; ++i) {
      even_bits[i] = static_cast<std::uint16_t>(rng.integer(0, 0xFFFF));
      odd_bits[i] = static_cast<std::uint16_t>(rng.integer(0, 0xFFFF));
      const std::uint32_t e = std::uint32_t{even_bits[i]} << 16, o = std::uint32_t{odd_bits[i]} << 16;
      std::memcpy(&even[i], &e, sizeof e);
      std::memcpy(&odd[i], &o, sizeof o);
    }
    store_row_pairs(even, odd, pairs);
    for (int i = 0; i < testing::kDotLanes; ++i)
      ASSERT_EQ(pairs[i], std::uint32_t{even_bits[i]} | std::uint32_t{odd_bits[i]} << 16) << "lane " << i;
  }
  std::printf("[ note ] %lld lanes equal to the model bit for bit\n", static_cast<long long>(compared));
}

using PairRows32 = void (*)(const std::uint16_t*, const std::uint16_t*, std::uint32_t*, const float*, float*, float*);

// Each lane of the pairs holds the two rows' values of the column that lane of the accumulators holds
// in the target's pair order, and the order goes back to columns exactly.
void expect_pair_order_consistent(PairRows32 pair_rows_32) {
  std::uint16_t even[32], odd[32];
  float columns[32], ordered[32], back[32];
  for (int c = 0; c < 32; ++c) {
    even[c] = static_cast<std::uint16_t>(0x1000 + c);
    odd[c] = static_cast<std::uint16_t>(0x2000 + c);
    columns[c] = static_cast<float>(c);
  }
  std::uint32_t pairs[32];
  pair_rows_32(even, odd, pairs, columns, ordered, back);
  std::vector<bool> seen(32, false);
  for (int lane = 0; lane < 32; ++lane) {
    const int c = static_cast<int>(ordered[lane]);
    ASSERT_TRUE(c >= 0 && c < 32 && !seen[static_cast<std::size_t>(c)]) << "lane " << lane << " holds column " << ordered[lane];
    seen[static_cast<std::size_t>(c)] = true;
    EXPECT_EQ(pairs[lane], std::uint32_t{even[c]} | std::uint32_t{odd[c]} << 16) << "lane " << lane << ", column " << c;
    EXPECT_EQ(back[lane], columns[lane]);
  }
}

TEST(Bf16Dot, PairOrderOfTwoValueRowsMatchesTheAccumulators) {
  if (missing_cpu_feature(Target::avx512_emulated).empty()) {
    SCOPED_TRACE("avx512_bf16_emulated");
    expect_pair_order_consistent(testing::emulated_pair_rows_32);
  }
  if (!supported(Target::avx512_bf16)) {
    GTEST_SKIP() << "the avx512_bf16 target's pair order not checked here: this CPU lacks "
                 << missing_cpu_feature(Target::avx512_bf16);
  }
  SCOPED_TRACE("avx512_bf16");
  expect_pair_order_consistent(testing::hardware_pair_rows_32);
}

TEST(Bf16Dot, EmulatedTargetMatchesTheModelBitForBit) {
  if (!missing_cpu_feature(Target::avx512_emulated).empty()) {
    GTEST_SKIP() << "the emulated target needs " << missing_cpu_feature(Target::avx512_emulated) << ", which this CPU lacks";
  }
  expect_matches_model(testing::emulated_dot_bf16, testing::emulated_round_to_bf16, testing::emulated_round_into_pairs,
                       testing::emulated_store_row_pairs);
}

TEST(Bf16Dot, InstructionMatchesTheModelBitForBit) {
  if (!supported(Target::avx512_bf16)) {
    GTEST_SKIP() << "vdpbf16ps not compared with its model here: this CPU lacks "
                 << missing_cpu_feature(Target::avx512_bf16);
  }
  expect_matches_model(testing::hardware_dot_bf16, testing::hardware_round_to_bf16, testing::hardware_round_into_pairs,
                       testing::hardware_store_row_pairs);
}

// ---- the forward kernel of each bf16-dot target ----

struct Case {
  const char* name;
  std::int64_t B, H, Hkv, n, m, d, dv;
  AttentionOptions options;
  bool strided_kv = false;  // K and V stored [B, m, Hkv, d]: packed through the element reader
  bool nan_in_unseen_value = false;  // a NaN value at a key no row sees: the block's float32 fallback
  bool odd_offset_kv = false;  // K and V start one element into their storage: rows only 2-byte aligned
};

std::vector<Case> cases() {
  static const float slopes[] = {0.01f, 0.02f, 0.03f};
  std::vector<Case> out;
  out.push_back({"odd_sizes_gqa", 1, 4, 2, 50, 700, 37, 19, {}});
  out.push_back({"one_key_block", 1, 4, 2, 60, 300, 64, 64, {}});
  AttentionOptions biased;
  biased.causal = Causal::bottom_right;
  biased.window = {300, 0};
  biased.softcap = 20;
  biased.alibi_slopes = slopes;
  out.push_back({"causal_window_softcap_alibi", 2, 3, 3, 70, 600, 64, 64, biased});
  AttentionOptions dropped;
  dropped.dropout_p = 0.15;
  dropped.seed = 7;
  out.push_back({"dropout", 1, 2, 1, 40, 430, 32, 48, dropped});
  out.push_back({"strided_kv", 1, 2, 2, 30, 650, 40, 24, {}, true});
  AttentionOptions causal;
  causal.causal = Causal::top_left;
  out.push_back({"nan_value_not_seen", 1, 2, 2, 30, 600, 16, 16, causal, false, true});
  out.push_back({"odd_offset_rows", 1, 2, 2, 30, 300, 38, 20, {}, false, false, true});
  // Decoding (one tile: bf16 dot products from the rows as stored): a GQA group of 4 live rows over
  // two key splits with an odd last block, one live row over one odd block, two rows with every bias,
  // a row whose window ends an odd block (41 keys seen of its 89), and a d_k not whole vectors of
  // pairs (the float32 products). The second and the last take 117 keys, one block however the CPU
  // decodes (kernels.hpp), so that whether P was rounded is checked on them. The last two have 8
  // heads, so that their gradients have rows enough for the ratio of differing elements
  // (DifferingTally) to mean something.
  out.push_back({"decode_gqa_odd_keys", 1, 8, 2, 1, 1001, 64, 64, {}});
  out.push_back({"decode_one_row_one_block", 2, 4, 4, 1, 117, 128, 32, {}});
  out.push_back({"decode_causal_window_softcap_alibi", 2, 3, 3, 2, 700, 64, 64, biased});
  AttentionOptions recent;
  recent.causal = Causal::bottom_right;
  recent.window = {40, 0};
  out.push_back({"decode_window_odd_block", 2, 8, 2, 1, 601, 32, 32, recent});
  out.push_back({"decode_d_k_not_whole_pairs", 2, 8, 1, 1, 117, 48, 64, {}});
  return out;
}

// How many elements of two bf16 tensors differ.
std::int64_t differing_count(const Tensor& a, const Tensor& b) {
  std::int64_t differ = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i) differ += testing::value(a, i) != testing::value(b, i) ? 1 : 0;
  return differ;
}

// The fraction of elements of two bf16 tensors that differ.
double differing_fraction(const Tensor& a, const Tensor& b) {
  return static_cast<double>(differing_count(a, b)) / static_cast<double>(std::max<std::int64_t>(a.numel(), 1));
}

// Elements that differ from the naive kernel's with P (and dS) rounded, summed over the cases, per
// target: a float32 value that straddles a bf16 rounding boundary (sums in another order, as the
// accuracy rule allows) rightly moves several outputs of its row at once, a large share of a small
// tensor (4 of a 2-head decode case's 64 dq elements, seed 9597462644639639114; 43 of 1024 in
// another), so the 5% bound holds over all the cases' elements, while each case must still differ
// from the unrounded naive kernel far more often than from the rounded one.
struct DifferingTally {
  std::int64_t differ = 0, elements = 0;
  void add(const Tensor& got, const Tensor& rounded) {
    differ += differing_count(got, rounded);
    elements += got.numel();
  }
  double fraction() const { return static_cast<double>(differ) / static_cast<double>(std::max<std::int64_t>(elements, 1)); }
};

TEST(Bf16Dot, ForwardRoundsPAndMeetsTheAccuracyRule) {
  const std::vector<Target> targets = bf16_dot_targets_here();
  for (Target t : compiled_targets())
    if (target_uses_bf16_dot(t) && !supported(t))
      std::printf("[ note ] target %s not run here: this CPU lacks %s\n", target_name(t), missing_cpu_feature(t).c_str());
  if (targets.empty()) GTEST_SKIP() << "no bf16-dot target runs on this CPU or is compiled into this build";
  ATTNKIT_TRACE_SEED();
  testing::Rng rng(15);
  std::vector<DifferingTally> tallies(targets.size());  // per target, over the cases of one key block
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const Tensor q = testing::random_tensor(rng, {c.B, c.H, c.n, c.d}, DType::bf16);
    Tensor k_store = testing::random_tensor(rng, c.strided_kv ? std::vector<std::int64_t>{c.B, c.m, c.Hkv, c.d}
                                                              : std::vector<std::int64_t>{c.B, c.Hkv, c.m, c.d}, DType::bf16);
    Tensor v_store = testing::random_tensor(rng, c.strided_kv ? std::vector<std::int64_t>{c.B, c.m, c.Hkv, c.dv}
                                                              : std::vector<std::int64_t>{c.B, c.Hkv, c.m, c.dv}, DType::bf16);
    if (c.nan_in_unseen_value) v_store.data<bfloat16>()[(c.m - 1) * c.dv] = to_bfloat16(std::numeric_limits<float>::quiet_NaN());
    ConstTensorView k_view = c.strided_kv ? k_store.view().permuted({0, 2, 1, 3}) : k_store.view();
    ConstTensorView v_view = c.strided_kv ? v_store.view().permuted({0, 2, 1, 3}) : v_store.view();
    Tensor k_shifted(DType::bf16, {k_store.numel() + 1}), v_shifted(DType::bf16, {v_store.numel() + 1});
    if (c.odd_offset_kv) {  // the same values one element further into their storage
      std::memcpy(k_shifted.data<bfloat16>() + 1, k_store.raw(), k_store.nbytes());
      std::memcpy(v_shifted.data<bfloat16>() + 1, v_store.raw(), v_store.nbytes());
      k_view = ConstTensorView::contiguous(k_shifted.data<bfloat16>() + 1, DType::bf16, {c.B, c.Hkv, c.m, c.d});
      v_view = ConstTensorView::contiguous(v_shifted.data<bfloat16>() + 1, DType::bf16, {c.B, c.Hkv, c.m, c.dv});
    }
    const Tensor k = Tensor::converted(k_view, DType::bf16), v = Tensor::converted(v_view, DType::bf16);  // contiguous copies for the oracles

    AttentionOptions reference_options = c.options;
    reference_options.kernel = Kernel::reference;
    auto wide = [](const Tensor& t) { return Tensor::converted(t.view(), DType::f64); };
    const Tensor exact = testing::run_forward(wide(q), wide(k), wide(v), reference_options).out;
    auto error_of = [&](const Tensor& out) { return testing::rms_diff(Tensor::converted(out.view(), DType::f64), exact); };
    const Tensor plain = Tensor::converted(testing::naive_f32_forward(q, k, v, c.options).view(), DType::bf16);
    const Tensor rounded = Tensor::converted(testing::naive_f32_forward(q, k, v, c.options, DType::bf16).view(), DType::bf16);
    const double naive_plain = error_of(plain), naive_rounded = error_of(rounded);
    const double floor = 1e-7;

    AttentionOptions fast_options = c.options;
    fast_options.kernel = Kernel::fast;
    // The keys of one block on every bf16-dot target (the AVX-512 geometry), by the kernel's own
    // rule: a decoding item (one tile of query rows) takes short blocks where this CPU does.
    const cpu::Geometry& g = cpu::kAvx512Geometry;
    const bool one_tile = c.n * (c.H / c.Hkv) <= g.tile_rows;
    const std::int64_t key_block = cpu::forward_key_block(g, one_tile, cpu::short_decode_blocks());
    for (std::size_t ti = 0; ti < targets.size(); ++ti) {
      const Target t = targets[ti];
      SCOPED_TRACE(target_name(t));
      set_target(t);
      Tensor out = testing::poisoned(DType::bf16, {c.B, c.H, c.n, c.dv});
      forward(q.view(), k_view, v_view, out.view(), fast_options);
      reset_target();
      const double fast = error_of(out);
      EXPECT_LE(fast, 2 * naive_rounded + floor) << "RMS errors: fast " << fast << ", naive with P rounded " << naive_rounded;
      // Whether P was rounded: with one key block (m ≤ 512, or 128 when decoding in short blocks:
      // geometry.hpp, kernels.hpp) the running max is the row's max, so the kernel rounds the very
      // weights the naive kernel rounds, and its bf16 outputs equal that kernel's but where float32 sums in another order straddle a
      // rounding boundary; without the rounding of P they would differ as often as the plain naive
      // kernel's do.
      const double differ_rounded = differing_fraction(out, rounded), differ_plain = differing_fraction(out, plain);
      std::printf("[ note ] %s %s: RMS error %.3g = %.2f x the naive kernel's with P rounded (plain naive: %.3g); "
                  "outputs differing from the naive ones: %.4f (P rounded), %.4f (plain)\n",
                  target_name(t), c.name, fast, fast / naive_rounded, naive_plain, differ_rounded, differ_plain);
      if (c.m <= key_block) {
        tallies[ti].add(out, rounded);
        EXPECT_GT(differ_plain, 4 * differ_rounded) << "P does not look rounded to bf16";
      }
    }
  }
  for (std::size_t ti = 0; ti < targets.size(); ++ti) {
    SCOPED_TRACE(target_name(targets[ti]));
    EXPECT_LT(tallies[ti].fraction(), 0.05) << tallies[ti].differ << " of " << tallies[ti].elements
                                            << " outputs differ from the naive kernel's with P rounded";
  }
}

// ---- the backward kernel of each bf16-dot target ----

// Its five products take pairs of bf16 values, with dropout(P) and dS rounded to bf16 first (on the
// float32 fallback of a block holding NaN too). Its gradients meet the accuracy rule against the
// naive backward that rounds the same way, and, P = exp(s − lse) being fixed by the lse passed in,
// their bf16 values equal that kernel's but where float32 sums in another order straddle a rounding
// boundary; without the rounding they would differ as often as the plain naive kernel's do.
TEST(Bf16Dot, BackwardRoundsPAndDsAndMeetsTheAccuracyRule) {
  const std::vector<Target> targets = bf16_dot_targets_here();
  if (targets.empty()) GTEST_SKIP() << "no bf16-dot target runs on this CPU or is compiled into this build";
  ATTNKIT_TRACE_SEED();
  testing::Rng rng(16);
  std::vector<std::array<DifferingTally, 3>> tallies(targets.size());  // per target and gradient, over the cases
  auto wide = [](const Tensor& t) { return Tensor::converted(t.view(), DType::f64); };
  auto narrow = [](const Tensor& t) { return Tensor::converted(t.view(), DType::bf16); };
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const Tensor q = testing::random_tensor(rng, {c.B, c.H, c.n, c.d}, DType::bf16);
    Tensor k = testing::random_tensor(rng, {c.B, c.Hkv, c.m, c.d}, DType::bf16);
    Tensor v = testing::random_tensor(rng, {c.B, c.Hkv, c.m, c.dv}, DType::bf16);
    const Tensor d_out = testing::random_tensor(rng, {c.B, c.H, c.n, c.dv}, DType::bf16);
    if (c.nan_in_unseen_value) v.data<bfloat16>()[(c.m - 1) * c.dv] = to_bfloat16(std::numeric_limits<float>::quiet_NaN());
    // K and V stored [B, m, Hkv, d] for the strided case: the same values, read through the element reader.
    const Tensor k_strided = narrow(Tensor::converted(k.view().permuted({0, 2, 1, 3}), DType::f32));
    const Tensor v_strided = narrow(Tensor::converted(v.view().permuted({0, 2, 1, 3}), DType::f32));
    const ConstTensorView k_view = c.strided_kv ? k_strided.view().permuted({0, 2, 1, 3}) : k.view();
    const ConstTensorView v_view = c.strided_kv ? v_strided.view().permuted({0, 2, 1, 3}) : v.view();

    AttentionOptions fast_options = c.options, reference_options = c.options;
    fast_options.kernel = Kernel::fast;
    reference_options.kernel = Kernel::reference;
    const testing::ForwardResult exact_fwd = testing::run_forward(wide(q), wide(k), wide(v), reference_options);
    Tensor exact[3] = {Tensor(DType::f64, q.shape()), Tensor(DType::f64, k.shape()), Tensor(DType::f64, v.shape())};
    backward(wide(q).view(), wide(k).view(), wide(v).view(), exact_fwd.out.view(), wide(d_out).view(), exact_fwd.lse.view(),
             exact[0].view(), exact[1].view(), exact[2].view(), reference_options);

    for (std::size_t ti = 0; ti < targets.size(); ++ti) {
      const Target t = targets[ti];
      SCOPED_TRACE(target_name(t));
      Tensor got[3] = {testing::poisoned(DType::bf16, q.shape()), testing::poisoned(DType::bf16, k.shape()),
                       testing::poisoned(DType::bf16, v.shape())};
      set_target(t);
      // The target's own forward, as in use (test_fast_backward.cpp's expect_accurate says why); the
      // naive backwards take its out and lse too.
      const testing::ForwardResult fwd = testing::run_forward(q, k, v, fast_options, DType::bf16);
      backward(q.view(), k_view, v_view, fwd.out.view(), d_out.view(), fwd.lse.view(), got[0].view(), got[1].view(),
               got[2].view(), fast_options);
      reset_target();
      const testing::NaiveGradients plain_f32 = testing::naive_f32_backward(q, k, v, fwd.out, d_out, fwd.lse, c.options);
      const testing::NaiveGradients rounded_f32 =
          testing::naive_f32_backward(q, k, v, fwd.out, d_out, fwd.lse, c.options, true);
      const Tensor plain[3] = {narrow(plain_f32.dq), narrow(plain_f32.dk), narrow(plain_f32.dv)};
      const Tensor rounded[3] = {narrow(rounded_f32.dq), narrow(rounded_f32.dk), narrow(rounded_f32.dv)};
      const char* names[3] = {"dq", "dk", "dv"};
      for (int g = 0; g < 3; ++g) {
        SCOPED_TRACE(names[g]);
        auto error_of = [&](const Tensor& x) { return testing::rms_diff(wide(x), exact[g]); };
        const double fast = error_of(got[g]), naive_rounded = error_of(rounded[g]);
        double largest = 1;
        for (double x : testing::values(exact[g]))
          if (std::isfinite(x)) largest = std::max(largest, std::fabs(x));
        EXPECT_LE(fast, 2 * naive_rounded + 1e-7 * largest)
            << "RMS errors: fast " << fast << ", naive with P and dS rounded " << naive_rounded;
        const double differ_rounded = differing_fraction(got[g], rounded[g]), differ_plain = differing_fraction(got[g], plain[g]);
        std::printf("[ note ] %s %s %s: RMS error %.3g = %.2f x the naive kernel's with P and dS rounded (plain naive: "
                    "%.3g); gradients differing from the naive ones: %.4f (rounded), %.4f (plain)\n",
                    target_name(t), c.name, names[g], fast, fast / naive_rounded, error_of(plain[g]), differ_rounded,
                    differ_plain);
        tallies[ti][static_cast<std::size_t>(g)].add(got[g], rounded[g]);
        EXPECT_GT(differ_plain, 4 * differ_rounded) << "P or dS does not look rounded to bf16";
      }
    }
  }
  const char* names[3] = {"dq", "dk", "dv"};
  for (std::size_t ti = 0; ti < targets.size(); ++ti) {
    for (std::size_t g = 0; g < 3; ++g) {
      SCOPED_TRACE(std::string(target_name(targets[ti])) + " " + names[g]);
      EXPECT_LT(tallies[ti][g].fraction(), 0.05) << tallies[ti][g].differ << " of " << tallies[ti][g].elements
                                                 << " gradients differ from the naive kernel's with P and dS rounded";
    }
  }
}

}  // namespace
}  // namespace attnkit
