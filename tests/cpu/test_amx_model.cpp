// The AMX tiles' portable model (src/cpu/simd/amx_model.hpp) on the cases that define tdpbf16ps and the
// tile moves, and, where the amx_bf16 target runs (the CPU has the tiles and Linux granted their data),
// the instruction against the model bit for bit on random tiles of every shape, denormals and
// infinities among the values. The kernels on the tiles are tested with every other target's
// (test_fast_forward.cpp, test_bf16_dot.cpp) and below on the shapes the tiles make special.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "attnkit/attention.hpp"
#include "attnkit/targets.hpp"
#include "cpu/amx_tiles.hpp"
#include "cpu/bf16_bits.hpp"
#include "cpu/simd/amx_model.hpp"
#include "cpu/simd/bf16_dot_model.hpp"
#include "support/naive_f32.hpp"
#include "support/target_twins.hpp"
#include "support/testing.hpp"

namespace attnkit {

namespace testing {
cpu::TileConfig tile_product_config(int rows, int depth, int columns) {
  cpu::TileConfig config;
  config.palette = 1;
  config.rows[0] = static_cast<std::uint8_t>(rows);
  config.bytes_per_row[0] = static_cast<std::uint16_t>(4 * columns);
  config.rows[1] = static_cast<std::uint8_t>(rows);
  config.bytes_per_row[1] = static_cast<std::uint16_t>(4 * depth);
  config.rows[2] = static_cast<std::uint8_t>(depth);
  config.bytes_per_row[2] = static_cast<std::uint16_t>(4 * columns);
  return config;
}

void model_tile_product(const float* c, const std::uint32_t* a, const std::uint32_t* b, float* out, int rows, int depth,
                        int columns, TilePairs pairs) {
  cpu::AmxModel::load_config(tile_product_config(rows, depth, columns));
  cpu::AmxModel::load(0, c, 4 * columns);
  cpu::AmxModel::load(1, a, 4 * depth);
  cpu::AmxModel::load(2, b, 4 * columns);
  if (pairs == TilePairs::f16) {
    cpu::AmxModel::dot_f16(0, 1, 2);
  } else {
    cpu::AmxModel::dot_bf16(0, 1, 2);
  }
  cpu::AmxModel::store(0, out, 4 * columns);
  cpu::AmxModel::release();
}
}  // namespace testing

namespace {

using testing::pair;
using testing::same_bits_or_both_nan;

// c + a·b for one element of a 1 × depth by depth × 1 product.
float one_sum(float c, const std::vector<std::uint32_t>& a, const std::vector<std::uint32_t>& b) {
  float out = 0;
  testing::model_tile_product(&c, a.data(), b.data(), &out, 1, static_cast<int>(a.size()), 1);
  return out;
}

// Two half values (each exactly representable) as one 32-bit pair: lo in the low half.
std::uint32_t half_pair(float lo, float hi) {
  return std::uint32_t{to_float16(lo).bits} | std::uint32_t{to_float16(hi).bits} << 16;
}

// c + a·b for one element, by tdpfp16ps's model.
float one_sum_f16(float c, const std::vector<std::uint32_t>& a, const std::vector<std::uint32_t>& b) {
  float out = 0;
  testing::model_tile_product(&c, a.data(), b.data(), &out, 1, static_cast<int>(a.size()), 1, testing::TilePairs::f16);
  return out;
}

bool runs_here(Target target) {
  const std::vector<Target> s = supported_targets();
  return std::find(s.begin(), s.end(), target) != s.end();
}
bool amx_runs_here() { return runs_here(Target::amx_bf16); }

// ---- the model ----

TEST(AmxModel, SumsEvenAndOddProductsApartThenAddsThemToTheSum) {
  // Each product is 2^-24: c + even + odd one at a time would round 1 + 2^-24 back to 1 twice (ties to
  // even); the instruction adds even + odd = 2^-23 to 1 once, which is exact.
  const float tiny = 0x1p-12f;
  EXPECT_EQ(one_sum(1.0f, {pair(tiny, tiny)}, {pair(tiny, tiny)}), 1.0f + 0x1p-23f);
  // Across k the even sums stay apart from the odd ones: 2^24 + 1 − 2^24 in the even lane is 0 (the
  // tie rounds to even), the odd lane's 3 is kept.
  EXPECT_EQ(one_sum(0.0f, {pair(0x1p24f, 1.0f), pair(1.0f, 1.0f), pair(-0x1p24f, 1.0f)},
                    {pair(1.0f, 1.0f), pair(1.0f, 1.0f), pair(1.0f, 1.0f)}),
            3.0f);
  EXPECT_EQ(one_sum(10.0f, {pair(3.0f, 2.0f)}, {pair(5.0f, 7.0f)}), 39.0f);  // 10 + 3·5 + 2·7
}

TEST(AmxModel, ReadsDenormalInputsAsZeroAndFlushesDenormalResults) {
  EXPECT_EQ(one_sum(0.0f, {0x00010001u}, {pair(0x1p100f, 0x1p100f)}), 0.0f) << "bf16 denormals read as zero";
  EXPECT_EQ(one_sum(0.0f, {pair(0x1p-70f, 0.0f)}, {pair(0x1p-70f, 0.0f)}), 0.0f) << "2^-140, a denormal, flushed";
  EXPECT_EQ(one_sum(0x1p-130f, {pair(0.0f, 0.0f)}, {pair(0.0f, 0.0f)}), 0.0f) << "a denormal sum read as zero";
  EXPECT_TRUE(std::isnan(one_sum(0.0f, {pair(std::numeric_limits<float>::infinity(), 0.0f)}, {pair(0.0f, 0.0f)})));
}

// tdpfp16ps: the same order of sums over pairs of halves; half denormals are values (every half is
// a normal float), while denormal float32 sums are still read as zero and flushed.
TEST(AmxModel, Fp16SumsPairsInTheSameOrderAndKeepsHalfDenormals) {
  const float tiny = 0x1p-12f;  // a normal half
  EXPECT_EQ(one_sum_f16(1.0f, {half_pair(tiny, tiny)}, {half_pair(tiny, tiny)}), 1.0f + 0x1p-23f);
  EXPECT_EQ(one_sum_f16(0.0f, {half_pair(4096.0f, 1.0f), half_pair(1.0f, 1.0f), half_pair(-4096.0f, 1.0f)},
                        {half_pair(4096.0f, 1.0f), half_pair(1.0f, 1.0f), half_pair(4096.0f, 1.0f)}),
            3.0f);  // even lane: 2^24 + 1 − 2^24 = 0 (the tie rounds to even); odd lane: 3
  EXPECT_EQ(one_sum_f16(10.0f, {half_pair(3.0f, 2.0f)}, {half_pair(5.0f, 7.0f)}), 39.0f);
  // The smallest half denormal, 2^−24, times 2^10: 2^−14, not zero.
  EXPECT_EQ(one_sum_f16(0.0f, {0x00000001u}, {half_pair(1024.0f, 0.0f)}), 0x1p-14f) << "half denormals are values";
  EXPECT_EQ(one_sum_f16(0.0f, {0x00000001u}, {0x00000001u}), 0x1p-48f) << "2^-24 · 2^-24, a normal float";
  EXPECT_EQ(one_sum_f16(0x1p-130f, {half_pair(0.0f, 0.0f)}, {half_pair(0.0f, 0.0f)}), 0.0f) << "a denormal sum read as zero";
  EXPECT_TRUE(std::isnan(one_sum_f16(0.0f, {half_pair(std::numeric_limits<float>::infinity(), 0.0f)}, {half_pair(0.0f, 1.0f)})));
}

TEST(AmxModel, MultipliesWholeTilesAsTheMatrixProductOfExactValues) {
  // Small integers: every sum is exact, so the tile product is the matrix product, element by element.
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> value(-8, 8);
  constexpr int kRows = 16, kDepth = 16, kColumns = 16;
  std::vector<float> a(kRows * 2 * kDepth), b(2 * kDepth * kColumns), c(kRows * kColumns), out(kRows * kColumns);
  for (float& x : a) x = static_cast<float>(value(rng));
  for (float& x : b) x = static_cast<float>(value(rng));
  for (float& x : c) x = static_cast<float>(value(rng));
  std::vector<std::uint32_t> a_pairs(kRows * kDepth), b_pairs(kDepth * kColumns);
  for (int m = 0; m < kRows; ++m)
    for (int k = 0; k < kDepth; ++k) a_pairs[m * kDepth + k] = pair(a[m * 2 * kDepth + 2 * k], a[m * 2 * kDepth + 2 * k + 1]);
  for (int k = 0; k < kDepth; ++k)  // B's pairs run down the inner dimension: rows 2k and 2k + 1 of b
    for (int n = 0; n < kColumns; ++n) b_pairs[k * kColumns + n] = pair(b[2 * k * kColumns + n], b[(2 * k + 1) * kColumns + n]);
  testing::model_tile_product(c.data(), a_pairs.data(), b_pairs.data(), out.data(), kRows, kDepth, kColumns);
  for (int m = 0; m < kRows; ++m) {
    for (int n = 0; n < kColumns; ++n) {
      float expected = c[m * kColumns + n];
      for (int x = 0; x < 2 * kDepth; ++x) expected += a[m * 2 * kDepth + x] * b[x * kColumns + n];
      EXPECT_EQ(out[m * kColumns + n], expected) << "row " << m << ", column " << n;
    }
  }
}

TEST(AmxModel, LoadsAndStoresTheConfiguredRowsAndZeroesTheRest) {
  cpu::AmxModel::load_config(cpu::uniform_tile_config(3, 8));  // 3 rows of two floats
  const float in[] = {1, 2, 9, 3, 4, 9, 5, 6, 9, 7, 8, 9};          // rows of stride 3 floats
  cpu::AmxModel::load(0, in, 3 * sizeof(float));
  float out[12];
  std::fill(std::begin(out), std::end(out), -1.0f);
  cpu::AmxModel::store(0, out, 4 * sizeof(float));  // a wider stride: the gaps stay untouched
  const float expected[] = {1, 2, -1, -1, 3, 4, -1, -1, 5, 6, -1, -1};
  for (int i = 0; i < 12; ++i) EXPECT_EQ(out[i], expected[i]) << i;
  cpu::AmxModel::zero(0);
  cpu::AmxModel::store(0, out, 2 * sizeof(float));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(out[i], 0.0f) << i;
  cpu::AmxModel::release();
}

TEST(AmxModel, StopsTheProgramOnShapesTheInstructionRefuses) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the kernels' thread pool may be running
  EXPECT_DEATH(
      {
        float x[256] = {};
        cpu::AmxModel::load(0, x, 64);
      },
      "without a tile configuration");
  EXPECT_DEATH(
      {
        cpu::TileConfig config = cpu::uniform_tile_config(16, 64);
        config.rows[2] = 8;  // B with 8 rows, but A's rows hold 16 pairs
        cpu::AmxModel::load_config(config);
        cpu::AmxModel::dot_bf16(0, 1, 2);
      },
      "shapes do not fit");
}

// ---- the instruction against the model ----

// Random bf16 bits: mostly normal values of a few magnitudes, some denormals, zeros of both signs and
// infinities (whose products make NaN), so that every rule of the instruction is exercised.
std::uint16_t random_bf16(std::mt19937& rng) {
  std::uniform_int_distribution<int> kind(0, 19), mantissa(0, 127), exponent(110, 140), sign(0, 1);
  const int k = kind(rng);
  const std::uint16_t s = static_cast<std::uint16_t>(sign(rng) << 15);
  if (k == 0) return static_cast<std::uint16_t>(s | mantissa(rng));           // denormal or zero
  if (k == 1) return static_cast<std::uint16_t>(s | 0x7F80);                  // infinity
  if (k == 2) return static_cast<std::uint16_t>(s | (1 << 7) | mantissa(rng));  // the smallest normals
  return static_cast<std::uint16_t>(s | exponent(rng) << 7 | mantissa(rng));
}

// Random half bits: as random_bf16, with the half's own exponent range (5 bits, bias 15).
std::uint16_t random_f16(std::mt19937& rng) {
  std::uniform_int_distribution<int> kind(0, 19), mantissa(0, 1023), exponent(8, 22), sign(0, 1);
  const int k = kind(rng);
  const std::uint16_t s = static_cast<std::uint16_t>(sign(rng) << 15);
  if (k == 0) return static_cast<std::uint16_t>(s | mantissa(rng));             // denormal or zero
  if (k == 1) return static_cast<std::uint16_t>(s | 0x7C00);                    // infinity
  if (k == 2) return static_cast<std::uint16_t>(s | (1 << 10) | mantissa(rng));  // the smallest normals
  return static_cast<std::uint16_t>(s | exponent(rng) << 10 | mantissa(rng));
}

// The instruction of `pairs` against its model on random tiles of every shape.
void expect_instruction_matches_model(testing::TilePairs pairs, std::uint16_t (*random_value)(std::mt19937&)) {
  std::mt19937 rng(7);
  for (const auto& [rows, depth, columns] : {std::array<int, 3>{16, 16, 16}, {1, 1, 1}, {7, 16, 16}, {16, 5, 16},
                                             {16, 16, 3}, {9, 11, 13}}) {
    SCOPED_TRACE("rows " + std::to_string(rows) + ", depth " + std::to_string(depth) + " pairs, columns " + std::to_string(columns));
    for (int trial = 0; trial < 50; ++trial) {
      std::vector<std::uint32_t> a(static_cast<std::size_t>(rows * depth)), b(static_cast<std::size_t>(depth * columns));
      std::vector<float> c(static_cast<std::size_t>(rows * columns));
      for (auto& x : a) x = random_value(rng) | std::uint32_t{random_value(rng)} << 16;
      for (auto& x : b) x = random_value(rng) | std::uint32_t{random_value(rng)} << 16;
      for (float& x : c) x = cpu::bf16_bits_to_float(random_bf16(rng)) * 3.0f;
      std::vector<float> model(c.size()), hardware(c.size());
      testing::model_tile_product(c.data(), a.data(), b.data(), model.data(), rows, depth, columns, pairs);
      testing::hardware_tile_product(c.data(), a.data(), b.data(), hardware.data(), rows, depth, columns, pairs);
      for (std::size_t i = 0; i < c.size(); ++i)
        ASSERT_TRUE(same_bits_or_both_nan(model[i], hardware[i])) << "element " << i << ": model " << model[i] << ", instruction " << hardware[i];
    }
  }
}

TEST(AmxModel, InstructionMatchesTheModelBitForBit) {
  if (!amx_runs_here()) {
    GTEST_SKIP() << "the amx_bf16 target does not run here (this CPU or its OS lacks " << missing_cpu_feature(Target::amx_bf16)
                 << "): the instruction cannot be compared with the model";
  }
  expect_instruction_matches_model(testing::TilePairs::bf16, random_bf16);
}

TEST(AmxModel, Fp16InstructionMatchesTheModelBitForBit) {
  if (!runs_here(Target::amx_fp16)) {
    GTEST_SKIP() << "the amx_fp16 target does not run here (this CPU or its OS lacks " << missing_cpu_feature(Target::amx_fp16)
                 << "): tdpfp16ps cannot be compared with the model";
  }
  expect_instruction_matches_model(testing::TilePairs::f16, random_f16);
}

// ---- the kernels on the tiles ----

// The tile path's own edges, on every tile target that runs here (the emulated one everywhere): d_k
// and d_v that do not fill a tile row (8, 40) or fill several (128, 136), keys ending inside a tile of
// 16 or a pair of tile rows (31, 33) and past one key block (513, 1100), query rows ending inside a
// tile (17, 40 rows over a GQA group), causal diagonals, masks, dropout and a NaN value no row sees.
// The outputs meet the accuracy rule against the naive kernel that rounds P as the tiles do, and no
// output stays poisoned.
struct TileCase {
  const char* name;
  std::int64_t H, Hkv, n, m, d, dv;
  AttentionOptions options;
  bool nan_in_unseen_value = false;
};

// The tile targets this CPU runs; a line for each compiled one it does not, saying what is missing.
std::vector<Target> tile_targets_here() {
  const std::vector<Target> supported = supported_targets();
  std::vector<Target> targets;
  for (Target t : compiled_targets()) {
    if (!target_uses_tiles(t)) continue;
    if (std::find(supported.begin(), supported.end(), t) != supported.end()) {
      targets.push_back(t);
    } else {
      std::printf("[ note ] target %s not run here: this CPU or its OS lacks %s\n", target_name(t), missing_cpu_feature(t).c_str());
    }
  }
  return targets;
}

std::vector<TileCase> tile_cases() {
  AttentionOptions causal;
  causal.causal = Causal::top_left;
  AttentionOptions bottom_right;
  bottom_right.causal = Causal::bottom_right;
  AttentionOptions capped;
  capped.softcap = 5.0;
  capped.window.left = 20;
  AttentionOptions dropout;
  dropout.dropout_p = 0.25;
  dropout.seed = 9;
  return {{"d8_keys31", 2, 2, 17, 31, 8, 8, {}},
          {"d40_dv24_keys33_gqa", 4, 2, 20, 33, 40, 24, {}},
          {"d128_dv136_keys513", 2, 1, 40, 513, 128, 136, {}},
          {"causal_keys1100", 2, 2, 100, 1100, 64, 64, causal},
          {"bottom_right_causal", 2, 1, 33, 70, 72, 40, bottom_right},
          {"softcap_window", 2, 2, 48, 200, 64, 32, capped},
          {"dropout", 2, 2, 24, 90, 32, 32, dropout},
          {"nan_value_not_seen", 2, 2, 20, 40, 32, 32, causal, true}};
}

// bf16 inputs on every tile target, f16 ones too (on the tiles of the f16 tile targets, on the vector
// target of the others): each held to the naive kernel that rounds P as it does.
TEST(AmxKernels, MeetTheAccuracyRuleOnTheTilesEdges) {
  const std::vector<Target> targets = tile_targets_here();
  if (targets.empty()) GTEST_SKIP() << "no tile target runs on this CPU or is compiled into this build";
  ATTNKIT_TRACE_SEED();
  testing::Rng rng(53);
  for (const TileCase& c : tile_cases()) {
   for (DType dtype : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(std::string(c.name) + ", " + std::string(dtype_name(dtype)));
    const Tensor q = testing::random_tensor(rng, {1, c.H, c.n, c.d}, dtype);
    const Tensor k = testing::random_tensor(rng, {1, c.Hkv, c.m, c.d}, dtype);
    Tensor v = testing::random_tensor(rng, {1, c.Hkv, c.m, c.dv}, dtype);
    if (c.nan_in_unseen_value) {
      const float nan = std::numeric_limits<float>::quiet_NaN();
      if (dtype == DType::bf16) v.data<bfloat16>()[(c.m - 1) * c.dv] = to_bfloat16(nan);
      else v.data<float16>()[(c.m - 1) * c.dv] = to_float16(nan);
    }
    AttentionOptions reference_options = c.options, fast_options = c.options;
    reference_options.kernel = Kernel::reference;
    fast_options.kernel = Kernel::fast;
    auto wide = [](const Tensor& t) { return Tensor::converted(t.view(), DType::f64); };
    const Tensor exact = testing::run_forward(wide(q), wide(k), wide(v), reference_options).out;
    for (Target t : targets) {
      SCOPED_TRACE(target_name(t));
      const DType rounding = testing::forward_p_rounding(t, dtype, dtype, dtype);
      const Tensor rounded = Tensor::converted(testing::naive_f32_forward(q, k, v, c.options, rounding).view(), dtype);
      const double naive = testing::rms_diff(wide(rounded), exact);
      set_target(t);
      Tensor out = testing::poisoned(dtype, {1, c.H, c.n, c.dv});
      Tensor lse = testing::poisoned(DType::f32, {1, c.H, c.n});
      ForwardExtras extras;
      extras.lse = lse.view();
      forward(q.view(), k.view(), v.view(), out.view(), fast_options, extras);
      reset_target();
      EXPECT_FALSE(testing::has_nan(out)) << "an output stayed poisoned, or a NaN value no row sees reached one";
      EXPECT_FALSE(testing::has_nan(lse));
      const double fast = testing::rms_diff(wide(out), exact);
      std::printf("[ note ] %s %s %s: RMS error %.3g = %.2f x the naive kernel's with P rounded to %s\n", target_name(t),
                  c.name, std::string(dtype_name(dtype)).c_str(), fast, fast / naive, std::string(dtype_name(rounding)).c_str());
      EXPECT_LE(fast, 2 * naive + 1e-7) << "RMS errors: fast " << fast << ", naive with P rounded " << naive;
    }
   }
  }
}

// Which way a target rounds P shows where the weights fall below f16's normal range: e^−15.875 ≈
// 2.13 · 2^−24 rounds to 2 · 2^−24 as an f16, 6% off. With 1000 such keys of value 1 after a key
// of weight 1 and value 0, the output is ≈ 1.2·10^−4 and moves by those 6%, far beyond an f16 output's
// rounding: an f16 tile target's output must be the naive kernel's with P rounded to f16, every other
// target's (its f16 calls run on vectors) the naive kernel's without.
TEST(AmxKernels, F16TilesRoundPToHalfAndNoOtherTargetDoes) {
  ATTNKIT_TRACE_SEED();
  constexpr std::int64_t kKeys = 1001, kD = 8;
  Tensor q(DType::f16, {1, 1, 2, kD}), k(DType::f16, {1, 1, kKeys, kD}), v(DType::f16, {1, 1, kKeys, kD});
  for (std::int64_t i = 0; i < 2 * kD; ++i) q.data<float16>()[i] = to_float16(i % kD == 0 ? 1.0f : 0.0f);
  for (std::int64_t j = 0; j < kKeys; ++j)
    for (std::int64_t c = 0; c < kD; ++c) {
      k.data<float16>()[j * kD + c] = to_float16(j > 0 && c == 0 ? -15.875f : 0.0f);
      v.data<float16>()[j * kD + c] = to_float16(j > 0 ? 1.0f : 0.0f);
    }
  AttentionOptions options;
  options.scale = 1.0;
  const Tensor plain = testing::naive_f32_forward(q, k, v, options);
  const Tensor rounded = testing::naive_f32_forward(q, k, v, options, DType::f16);
  const double want_plain = plain.data<float>()[0], want_rounded = rounded.data<float>()[0];
  ASSERT_GT(std::fabs(want_plain - want_rounded), 0.05 * want_plain) << "the case no longer tells the two apart";
  options.kernel = Kernel::fast;
  for (Target t : supported_targets()) {
    SCOPED_TRACE(target_name(t));
    const bool f16_tiles = testing::forward_p_rounding(t, DType::f16, DType::f16, DType::f16) == DType::f16;
    set_target(t);
    const testing::ForwardResult got = testing::run_forward(q, k, v, options, DType::f16);
    reset_target();
    const double want = f16_tiles ? want_rounded : want_plain;
    for (std::int64_t e = 0; e < got.out.numel(); ++e)
      EXPECT_NEAR(to_float(got.out.data<float16>()[e]), want, 2e-3 * want) << "element " << e;
  }
}

// dropout's 1/(1 − p) passes f16's largest value when p > 1 − 2^−16: a kept weight rounded to f16
// is then inf, and the item is redone with headroom, as every overflowing item is (flash_forward.inl).
// With every logit 0, each unnormalised weight is 1, and a kept one 2^17; the output, 2^17/m of the
// kept values, is finite and must match the reference's.
TEST(AmxKernels, F16TilesRedoAnItemWhoseDropoutWeightsOverflowHalf) {
  std::vector<Target> targets;
  for (Target t : supported_targets())
    if (target_uses_f16_tiles(t)) targets.push_back(t);
  if (targets.empty()) GTEST_SKIP() << "no f16 tile target runs on this CPU or is compiled into this build";
  ATTNKIT_TRACE_SEED();
  testing::Rng rng(57);
  constexpr std::int64_t kN = 16, kM = 512, kD = 16;
  AttentionOptions options;
  options.dropout_p = 1 - 0x1p-17;
  // A seed under which some of the weights are kept: each is with probability 2^-17.
  std::int64_t kept = 0;
  for (options.seed = 1; kept == 0 && options.seed < 100000; ++options.seed)
    for (std::int64_t i = 0; i < kN && kept == 0; ++i)
      for (std::int64_t j = 0; j < kM; ++j) kept += detail::dropout_keeps(options.seed, options.dropout_p, 0, 0, i, j) ? 1 : 0;
  --options.seed;
  ASSERT_GT(kept, 0) << "no seed keeps a weight";
  Tensor q(DType::f16, {1, 1, kN, kD});
  for (std::int64_t e = 0; e < q.numel(); ++e) q.data<float16>()[e] = to_float16(0.0f);
  const Tensor k = testing::random_tensor(rng, {1, 1, kM, kD}, DType::f16);
  const Tensor v = testing::random_tensor(rng, {1, 1, kM, kD}, DType::f16);
  AttentionOptions reference = options;
  reference.kernel = Kernel::reference;
  auto wide = [](const Tensor& t) { return Tensor::converted(t.view(), DType::f64); };
  const Tensor exact = testing::run_forward(wide(q), wide(k), wide(v), reference).out;
  double largest = 0;
  for (double x : testing::values(exact)) largest = std::max(largest, std::fabs(x));
  ASSERT_GT(largest, 0.0) << "a kept weight carries its value";
  options.kernel = Kernel::fast;
  for (Target t : targets) {
    SCOPED_TRACE(target_name(t));
    set_target(t);
    const testing::ForwardResult got = testing::run_forward(q, k, v, options, DType::f16);
    reset_target();
    const std::vector<double> out = testing::values(wide(got.out)), want = testing::values(exact);
    for (std::size_t e = 0; e < out.size(); ++e) {
      ASSERT_TRUE(std::isfinite(out[e])) << "element " << e;
      EXPECT_NEAR(out[e], want[e], 2e-3 * largest) << "element " << e;
    }
  }
}

// The backward on the same edges: its five products on the tiles (the dV and dK sums over rows
// transposed per block, a block's rows padded to whole tile rows of pairs) meet the accuracy rule
// against the naive backward that rounds dropout(P) and dS as the tiles do, with the target's own
// forward's out and lse, and no gradient stays poisoned.
TEST(AmxKernels, BackwardMeetsTheAccuracyRuleOnTheTilesEdges) {
  const std::vector<Target> targets = tile_targets_here();
  if (targets.empty()) GTEST_SKIP() << "no tile target runs on this CPU or is compiled into this build";
  ATTNKIT_TRACE_SEED();
  testing::Rng rng(54);
  auto wide = [](const Tensor& t) { return Tensor::converted(t.view(), DType::f64); };
  auto narrow = [](const Tensor& t) { return Tensor::converted(t.view(), DType::bf16); };
  for (const TileCase& c : tile_cases()) {
    if (c.nan_in_unseen_value) continue;  // the backward's NaN cases are test_fast_backward.cpp's
    SCOPED_TRACE(c.name);
    const Tensor q = testing::random_tensor(rng, {1, c.H, c.n, c.d}, DType::bf16);
    const Tensor k = testing::random_tensor(rng, {1, c.Hkv, c.m, c.d}, DType::bf16);
    const Tensor v = testing::random_tensor(rng, {1, c.Hkv, c.m, c.dv}, DType::bf16);
    const Tensor d_out = testing::random_tensor(rng, {1, c.H, c.n, c.dv}, DType::bf16);
    AttentionOptions reference_options = c.options, fast_options = c.options;
    reference_options.kernel = Kernel::reference;
    fast_options.kernel = Kernel::fast;
    const testing::ForwardResult exact_fwd = testing::run_forward(wide(q), wide(k), wide(v), reference_options);
    Tensor exact[3] = {Tensor(DType::f64, q.shape()), Tensor(DType::f64, k.shape()), Tensor(DType::f64, v.shape())};
    backward(wide(q).view(), wide(k).view(), wide(v).view(), exact_fwd.out.view(), wide(d_out).view(), exact_fwd.lse.view(),
             exact[0].view(), exact[1].view(), exact[2].view(), reference_options);
    for (Target t : targets) {
      SCOPED_TRACE(target_name(t));
      set_target(t);
      const testing::ForwardResult fwd = testing::run_forward(q, k, v, fast_options, DType::bf16);
      Tensor got[3] = {testing::poisoned(DType::bf16, q.shape()), testing::poisoned(DType::bf16, k.shape()),
                       testing::poisoned(DType::bf16, v.shape())};
      backward(q.view(), k.view(), v.view(), fwd.out.view(), d_out.view(), fwd.lse.view(), got[0].view(), got[1].view(),
               got[2].view(), fast_options);
      reset_target();
      const testing::NaiveGradients rounded = testing::naive_f32_backward(q, k, v, fwd.out, d_out, fwd.lse, c.options, true);
      const Tensor naive[3] = {narrow(rounded.dq), narrow(rounded.dk), narrow(rounded.dv)};
      const char* names[3] = {"dq", "dk", "dv"};
      for (int g = 0; g < 3; ++g) {
        SCOPED_TRACE(names[g]);
        EXPECT_FALSE(testing::has_nan(got[g])) << "a gradient stayed poisoned";
        double largest = 1;
        for (double x : testing::values(exact[g])) largest = std::max(largest, std::fabs(x));
        const double fast = testing::rms_diff(wide(got[g]), exact[g]), naive_error = testing::rms_diff(wide(naive[g]), exact[g]);
        std::printf("[ note ] %s %s %s: RMS error %.3g = %.2f x the naive backward's with P and dS rounded\n", target_name(t),
                    c.name, names[g], fast, fast / naive_error);
        EXPECT_LE(fast, 2 * naive_error + 1e-7 * largest) << "RMS errors: fast " << fast << ", naive " << naive_error;
      }
    }
  }
}

// An f16 tile target runs bf16 calls with the bf16 tile target's kernel source, compiled once more:
// forward (prefill with every kind of tile edge, decoding, dropout) and backward give the same bits
// on both, so that the tests looping over targets per dtype run those calls on one of them only
// (support/target_twins.hpp).
TEST(AmxKernels, Fp16TileTargetsRunBf16CallsAsTheBf16TileTargets) {
  std::vector<std::pair<Target, Target>> pairs;
  for (Target t : supported_targets()) {
    const std::optional<Target> twin = testing::bf16_tile_twin(t);
    if (!twin) continue;
    if (runs_here(*twin)) pairs.emplace_back(t, *twin);
    else std::printf("[ note ] %s not compared: %s does not run here\n", target_name(t), target_name(*twin));
  }
  if (pairs.empty()) GTEST_SKIP() << "no f16 tile target runs here beside its bf16 tile target";
  ATTNKIT_TRACE_SEED();
  testing::Rng rng(58);
  for (const TileCase& c : tile_cases()) {
    SCOPED_TRACE(c.name);
    const Tensor q = testing::random_tensor(rng, {1, c.H, c.n, c.d}, DType::bf16);
    const Tensor q1 = testing::random_tensor(rng, {1, c.H, 1, c.d}, DType::bf16);  // a decode step
    const Tensor k = testing::random_tensor(rng, {1, c.Hkv, c.m, c.d}, DType::bf16);
    const Tensor v = testing::random_tensor(rng, {1, c.Hkv, c.m, c.dv}, DType::bf16);
    const Tensor d_out = testing::random_tensor(rng, {1, c.H, c.n, c.dv}, DType::bf16);
    AttentionOptions options = c.options;
    options.kernel = Kernel::fast;
    auto run = [&](Target t) {
      set_target(t);
      const testing::ForwardResult fwd = testing::run_forward(q, k, v, options, DType::bf16);
      AttentionOptions decode = options;
      decode.causal = Causal::bottom_right;
      const testing::ForwardResult step = testing::run_forward(q1, k, v, decode, DType::bf16);
      std::vector<Tensor> grads = {testing::poisoned(DType::bf16, q.shape()), testing::poisoned(DType::bf16, k.shape()),
                                   testing::poisoned(DType::bf16, v.shape())};
      backward(q.view(), k.view(), v.view(), fwd.out.view(), d_out.view(), fwd.lse.view(), grads[0].view(), grads[1].view(),
               grads[2].view(), options);
      reset_target();
      std::vector<Tensor> all = {fwd.out, fwd.lse, step.out, step.lse};
      for (Tensor& g : grads) all.push_back(std::move(g));
      return all;
    };
    for (const auto& [f16_tiles, bf16_tiles] : pairs) {
      SCOPED_TRACE(std::string(target_name(f16_tiles)) + " against " + target_name(bf16_tiles));
      const std::vector<Tensor> a = run(f16_tiles), b = run(bf16_tiles);
      const char* names[] = {"out", "lse", "decode out", "decode lse", "dq", "dk", "dv"};
      for (std::size_t i = 0; i < a.size(); ++i)
        EXPECT_EQ(std::memcmp(a[i].raw(), b[i].raw(), a[i].nbytes()), 0) << names[i] << " differs";
    }
  }
}

// A decode step of a GQA group of at most 8 query rows reads K and V as bf16 pairs on vectors, not
// on the tiles (too little work per key to fill them): its bits are those of the bf16-dot vector
// target (avx512_bf16, or its stand-in for the stand-ins), one or several key blocks, with a window
// and with dropout. A larger group takes the tiles and meets the accuracy rule there (the tile cases
// above decode groups of 1 and 2 against the rule too).
TEST(AmxKernels, DecodeOfUpToEightRowsRunsAsTheBf16DotVectorTarget) {
  std::vector<std::pair<Target, Target>> pairs;
  for (Target t : tile_targets_here()) {
    const std::string name = target_name(t);
    const std::optional<Target> vectors = target_from_name(name.ends_with("_emulated") ? "avx512_bf16_emulated" : "avx512_bf16");
    if (vectors && runs_here(*vectors)) pairs.emplace_back(t, *vectors);
  }
  if (pairs.empty()) GTEST_SKIP() << "no tile target runs here beside its bf16-dot vector target";
  ATTNKIT_TRACE_SEED();
  testing::Rng rng(61);
  struct Case {
    std::int64_t H, Hkv, n, m, d;
    AttentionOptions options;
  };
  AttentionOptions window, dropout;
  window.window.left = 300;
  dropout.dropout_p = 0.2;
  dropout.seed = 4;
  for (const Case& c : {Case{4, 1, 1, 300, 64, {}}, Case{8, 2, 1, 1100, 128, window}, Case{2, 2, 1, 700, 32, dropout},
                        Case{8, 4, 2, 513, 64, {}}, Case{8, 1, 1, 2500, 128, {}}}) {
    SCOPED_TRACE("H " + std::to_string(c.H) + " over " + std::to_string(c.Hkv) + ", n " + std::to_string(c.n) + ", m " +
                 std::to_string(c.m) + ", d " + std::to_string(c.d));
    const Tensor q = testing::random_tensor(rng, {2, c.H, c.n, c.d}, DType::bf16);
    const Tensor k = testing::random_tensor(rng, {2, c.Hkv, c.m, c.d}, DType::bf16);
    const Tensor v = testing::random_tensor(rng, {2, c.Hkv, c.m, c.d}, DType::bf16);
    AttentionOptions options = c.options;
    options.kernel = Kernel::fast;
    options.causal = Causal::bottom_right;
    auto run = [&](Target t) {
      set_target(t);
      testing::ForwardResult r = testing::run_forward(q, k, v, options, DType::bf16);
      reset_target();
      return r;
    };
    for (const auto& [tiles, vectors] : pairs) {
      SCOPED_TRACE(std::string(target_name(tiles)) + " against " + target_name(vectors));
      const testing::ForwardResult a = run(tiles), b = run(vectors);
      EXPECT_EQ(std::memcmp(a.out.raw(), b.out.raw(), a.out.nbytes()), 0) << "out differs";
      EXPECT_EQ(std::memcmp(a.lse.raw(), b.lse.raw(), a.lse.nbytes()), 0) << "lse differs";
    }
  }
}

}  // namespace
}  // namespace attnkit
