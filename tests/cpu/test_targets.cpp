// The target table (src/cpu/target.cpp): which targets are compiled and supported, the default, the
// errors for a target this CPU cannot run, and that the emulated targets run the AVX-512 tile geometry.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "attnkit/error.hpp"
#include "attnkit/targets.hpp"
#include "cpu/kernels.hpp"
#include "cpu/lane_sums.hpp"

namespace attnkit {
namespace {

bool contains(const std::vector<Target>& targets, Target t) { return std::find(targets.begin(), targets.end(), t) != targets.end(); }

// The target calls use when nothing calls set_target: ATTNKIT_TARGET's when the environment forces
// one (as the test command's scalar pass does), else the default.
Target unforced_target() {
  const char* forced = std::getenv("ATTNKIT_TARGET");
  if (forced == nullptr || *forced == '\0') return default_target();
  for (Target t : compiled_targets())
    if (std::string(target_name(t)) == forced) return t;
  ADD_FAILURE() << "ATTNKIT_TARGET=" << forced << " names no target";
  return default_target();
}

TEST(Targets, ScalarIsAlwaysSupportedAndTheDefaultIsActive) {
  const std::vector<Target> supported = supported_targets();
  ASSERT_FALSE(supported.empty());
  EXPECT_EQ(supported.back(), Target::scalar);
  EXPECT_EQ(active_target(), unforced_target());
  EXPECT_TRUE(contains(supported, default_target()));
  EXPECT_FALSE(target_is_emulated(default_target())) << "an emulated target is never the default";
  set_target(Target::scalar);
  EXPECT_EQ(active_target(), Target::scalar);
  reset_target();
  EXPECT_EQ(active_target(), unforced_target());
  std::printf("[ note ] default target: %s\n", default_target_reason().c_str());
}

TEST(Targets, SupportedMeansNoMissingFeature) {
  const std::vector<Target> supported = supported_targets();
  for (Target t : compiled_targets()) {
    SCOPED_TRACE(target_name(t));
    if (contains(supported, t)) {
      EXPECT_EQ(missing_cpu_feature(t), "");
      continue;
    }
    // A target this CPU cannot run: forcing it raises an error that names the missing feature.
    const std::string missing = missing_cpu_feature(t);
    ASSERT_FALSE(missing.empty());
    try {
      set_target(t);
      ADD_FAILURE() << "set_target accepted a target this CPU cannot run";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::unsupported);
      EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(target_name(t)), std::string::npos) << e.what();
    }
    std::printf("[ note ] target %s is compiled but not tested here: this CPU lacks %s\n", target_name(t), missing.c_str());
  }
  reset_target();
}

TEST(Targets, NamesAndRequirementsAreThoseOfTheTable) {
  EXPECT_STREQ(target_name(Target::avx512), "avx512");
  EXPECT_STREQ(target_name(Target::avx512_bf16_emulated), "avx512_bf16_emulated");
  EXPECT_NE(std::string(target_requirements(Target::avx512)).find("AVX-512F"), std::string::npos);
  EXPECT_NE(std::string(target_requirements(Target::avx512_bf16)).find("AVX512_BF16"), std::string::npos);
  EXPECT_TRUE(target_uses_bf16_dot(Target::avx512_bf16));
  EXPECT_TRUE(target_uses_bf16_dot(Target::avx512_bf16_emulated));
  EXPECT_FALSE(target_uses_bf16_dot(Target::avx512));
  EXPECT_TRUE(target_is_emulated(Target::avx512_emulated));
  EXPECT_FALSE(target_is_emulated(Target::avx2));
  EXPECT_STREQ(target_name(Target::amx_bf16), "amx_bf16");
  EXPECT_NE(std::string(target_requirements(Target::amx_bf16)).find("AMX-TILE, AMX-BF16"), std::string::npos);
  EXPECT_TRUE(target_is_emulated(Target::amx_bf16_emulated));
  EXPECT_NE(std::string(target_requirements(Target::amx_fp16)).find("AMX-TILE, AMX-BF16, AMX-FP16"), std::string::npos);
  EXPECT_TRUE(target_is_emulated(Target::amx_fp16_emulated));
  EXPECT_FALSE(target_is_emulated(Target::amx_fp16));
  for (Target t : {Target::amx_bf16, Target::amx_bf16_emulated, Target::amx_fp16, Target::amx_fp16_emulated}) {
    EXPECT_TRUE(target_uses_tiles(t)) << target_name(t);
    EXPECT_TRUE(target_uses_bf16_dot(t)) << target_name(t);
  }
  EXPECT_EQ(tile_vector_target(Target::amx_bf16), Target::avx512);
  EXPECT_EQ(tile_vector_target(Target::amx_bf16_emulated), Target::avx512_emulated);
  EXPECT_EQ(tile_vector_target(Target::amx_fp16), Target::avx512);
  EXPECT_EQ(tile_vector_target(Target::amx_fp16_emulated), Target::avx512_emulated);
  for (Target t : {Target::amx_fp16, Target::amx_fp16_emulated}) EXPECT_TRUE(target_uses_f16_tiles(t)) << target_name(t);
  for (Target t : {Target::scalar, Target::avx2, Target::avx512, Target::avx512_bf16, Target::avx512_emulated,
                   Target::avx512_bf16_emulated, Target::amx_bf16, Target::amx_bf16_emulated})
    EXPECT_FALSE(target_uses_f16_tiles(t)) << target_name(t);
  for (Target t : {Target::scalar, Target::avx2, Target::avx512, Target::avx512_bf16, Target::avx512_emulated,
                   Target::avx512_bf16_emulated}) {
    EXPECT_FALSE(target_uses_tiles(t)) << target_name(t);
    EXPECT_EQ(tile_vector_target(t), t) << target_name(t);
  }
}

// The default per kind of CPU, asked of the choice itself (the CPUs need not be this one): AMX only
// where the CPU has the tiles and Linux grants their data, and the AVX-512 targets without any AMX.
TEST(Targets, EachKindOfCpuGetsItsDefault) {
  const std::vector<Target> compiled = compiled_targets();
  if (!contains(compiled, Target::amx_bf16)) GTEST_SKIP() << "this build has no x86 targets";
  cpu::CpuProfile avx2_only;  // Zen 3, Haswell to Alder Lake
  avx2_only.avx2 = true;
  cpu::CpuProfile avx512 = avx2_only;  // Skylake-SP to Ice Lake
  avx512.avx512 = true;
  cpu::CpuProfile slow_bf16 = avx512;  // Cooper Lake: vdpbf16ps at half the FMA rate, no tiles
  slow_bf16.avx512_bf16 = true;
  cpu::CpuProfile zen4 = slow_bf16;  // Zen 4 and 5: vdpbf16ps at twice the FMA rate, no tiles
  zen4.fast_bf16_dot = true;
  cpu::CpuProfile xeon_amx = slow_bf16;  // Sapphire Rapids and later
  xeon_amx.amx_bf16 = true;
  xeon_amx.tile_data_granted = true;
  cpu::CpuProfile tiles_refused = xeon_amx;  // an older kernel, or a sandbox that refuses arch_prctl
  tiles_refused.tile_data_granted = false;
  cpu::CpuProfile granite_rapids = xeon_amx;  // AMX-FP16 as well
  granite_rapids.amx_fp16 = true;
  cpu::CpuProfile fp16_tiles_refused = granite_rapids;
  fp16_tiles_refused.tile_data_granted = false;
  EXPECT_EQ(cpu::default_target_for({}), Target::scalar);
  EXPECT_EQ(cpu::default_target_for(avx2_only), Target::avx2);
  EXPECT_EQ(cpu::default_target_for(avx512), Target::avx512);
  EXPECT_EQ(cpu::default_target_for(slow_bf16), Target::avx512);
  EXPECT_EQ(cpu::default_target_for(zen4), Target::avx512_bf16);
  EXPECT_EQ(cpu::default_target_for(xeon_amx), Target::amx_bf16);
  EXPECT_EQ(cpu::default_target_for(tiles_refused), Target::avx512);
  EXPECT_EQ(cpu::default_target_for(granite_rapids), Target::amx_fp16);
  EXPECT_EQ(cpu::default_target_for(fp16_tiles_refused), Target::avx512);
  EXPECT_EQ(cpu::default_target_for(avx2_only), cpu::default_target_for([] {
              cpu::CpuProfile tiles_without_avx512;  // nothing but tiles gives no AMX target
              tiles_without_avx512.avx2 = true;
              tiles_without_avx512.amx_bf16 = tiles_without_avx512.tile_data_granted = true;
              return tiles_without_avx512;
            }()));
}

// The tile targets' calls: bf16 q, k and v on the tiles whatever their size (a packed sequence is
// computed as alone), forward and backward; f16 q, k and v on the tiles of the f16 tile targets for
// the forward only; everything else on the vector target.
TEST(Targets, TileTargetsRunBf16ForwardsOnTheTilesAndTheRestOnVectors) {
  auto problem = [](Target target, DType q, DType kv, std::int64_t n) {
    detail::Problem p;
    p.target = target;
    p.sizes.n = n;
    static float storage[1];
    p.q = ConstTensorView::contiguous(storage, q, {1, 1, 0, 1});
    p.k = ConstTensorView::contiguous(storage, kv, {1, 1, 0, 1});
    p.v = ConstTensorView::contiguous(storage, kv, {1, 1, 0, 1});
    return p;
  };
  for (Target t : {Target::amx_bf16, Target::amx_bf16_emulated, Target::amx_fp16, Target::amx_fp16_emulated}) {
    SCOPED_TRACE(target_name(t));
    const Target f16_forward = target_uses_f16_tiles(t) ? t : tile_vector_target(t);
    for (Pass pass : {Pass::forward, Pass::backward}) {
      EXPECT_EQ(cpu::kernel_target(problem(t, DType::bf16, DType::bf16, 1), pass), t);
      EXPECT_EQ(cpu::kernel_target(problem(t, DType::bf16, DType::bf16, 4096), pass), t);
      EXPECT_EQ(cpu::kernel_target(problem(t, DType::f32, DType::f32, 4096), pass), tile_vector_target(t));
      EXPECT_EQ(cpu::kernel_target(problem(t, DType::bf16, DType::f16, 1), pass), tile_vector_target(t));
      EXPECT_EQ(call_target(t, DType::bf16, DType::bf16, DType::bf16, pass), t);
      EXPECT_EQ(call_target(t, DType::f32, DType::int8, DType::int8, pass), tile_vector_target(t));
      EXPECT_EQ(call_target(t, DType::bf16, DType::bf16, DType::f32, pass), tile_vector_target(t));
      EXPECT_EQ(call_target(t, DType::f16, DType::f16, DType::bf16, pass), tile_vector_target(t));
    }
    EXPECT_EQ(cpu::kernel_target(problem(t, DType::f16, DType::f16, 1), Pass::forward), f16_forward);
    EXPECT_EQ(cpu::kernel_target(problem(t, DType::f16, DType::f16, 4096), Pass::forward), f16_forward);
    EXPECT_EQ(cpu::kernel_target(problem(t, DType::f16, DType::f16, 4096), Pass::backward), tile_vector_target(t));
  }
  EXPECT_EQ(cpu::kernel_target(problem(Target::avx512_bf16, DType::f32, DType::f32, 4096), Pass::forward), Target::avx512_bf16);
  EXPECT_EQ(call_target(Target::avx2, DType::f16, DType::f16, DType::f16, Pass::forward), Target::avx2);
}

// The emulated tile target runs the AMX geometry: 16-row tiles of 32 columns, AVX-512's blocks.
TEST(Targets, EmulatedTileTargetRunsTheAmxGeometry) {
  for (Target t : {Target::amx_bf16_emulated, Target::amx_fp16_emulated}) {
    SCOPED_TRACE(target_name(t));
    if (!contains(supported_targets(), t)) GTEST_SKIP() << target_name(t) << " is not compiled into this build or does not run here";
    const cpu::Geometry g = cpu::forward_kernels(t).geometry;
    EXPECT_EQ(g.tile_rows, 16);
    EXPECT_EQ(g.tile_cols(), 32);
    EXPECT_EQ(g.key_block, cpu::kAvx512Geometry.key_block);
  }
}

// Names back to targets: every target's name, and nothing else (a prefix, a case change, empty).
TEST(Targets, EveryNameFindsItsTargetAndNothingElseDoes) {
  const std::string names = target_names();
  for (Target target : {Target::scalar, Target::avx2, Target::avx512, Target::avx512_bf16, Target::avx512_emulated,
                        Target::avx512_bf16_emulated, Target::amx_bf16, Target::amx_bf16_emulated, Target::amx_fp16,
                        Target::amx_fp16_emulated}) {
    EXPECT_EQ(target_from_name(target_name(target)), target) << target_name(target);
    EXPECT_NE(names.find(target_name(target)), std::string::npos) << names;
  }
  for (const char* name : {"", "avx", "AVX2", "avx512 ", "avx512_bf", "default"}) {
    EXPECT_EQ(target_from_name(name), std::nullopt) << "'" << name << "'";
  }
}

// The emulated targets stand in for the AVX-512 ones: same lanes, tiles and key blocks, so the tests
// that loop over supported_targets() run the 16-lane code paths on every AVX2 machine.
TEST(Targets, EmulatedTargetsRunTheAvx512Geometry) {
  const std::vector<Target> compiled = compiled_targets();
  if (!contains(compiled, Target::avx512_emulated)) {
    GTEST_SKIP() << "this build has no emulated targets (configure with -DATTNKIT_EMULATED_TARGETS=ON)";
  }
  if (!contains(supported_targets(), Target::avx512_emulated)) {
    GTEST_SKIP() << "the emulated targets need " << missing_cpu_feature(Target::avx512_emulated) << ", which this CPU lacks";
  }
  for (Target t : {Target::avx512_emulated, Target::avx512_bf16_emulated}) {
    SCOPED_TRACE(target_name(t));
    const cpu::Geometry g = cpu::forward_kernels(t).geometry;
    EXPECT_EQ(g.lanes, cpu::kAvx512Geometry.lanes);
    EXPECT_EQ(g.tile_rows, cpu::kAvx512Geometry.tile_rows);
    EXPECT_EQ(g.tile_vectors, cpu::kAvx512Geometry.tile_vectors);
    EXPECT_EQ(g.key_block, cpu::kAvx512Geometry.key_block);
    EXPECT_EQ(g.decode_key_block, cpu::kAvx512Geometry.decode_key_block);
    EXPECT_EQ(cpu::backward_kernels(t).geometry.tile_cols(), cpu::kAvx512Geometry.tile_cols());
  }
  EXPECT_EQ(cpu::forward_kernels(Target::avx2).geometry.tile_cols(), cpu::kAvx2Geometry.tile_cols());
}

// Decoding's scores end in one sum across lanes per key and query row; the avx512 target sums up to
// 16 vectors at once by a tree (Avx512Isa::reduce_add_each) that must give each vector's sum bit for
// bit as reduce_add does alone (so a score never depends on how many keys a step took): random
// values over 60 binades of both signs, where the order of additions shows, and ±inf and NaN (NaN
// where NaN, whatever its bits).
TEST(Targets, Avx512LaneSumTreeEqualsOneVectorAtATimeBitForBit) {
  if (!missing_cpu_feature(Target::avx512).empty()) {
    GTEST_SKIP() << "the reduction tree is not run here: this CPU lacks " << missing_cpu_feature(Target::avx512);
  }
  std::mt19937 random(15);
  std::uniform_real_distribution<float> exponent(-30.0f, 30.0f), unit(0.0f, 1.0f);
  const float specials[] = {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), -0.0f, 0.0f};
  for (int trial = 0; trial < 2000; ++trial) {
    const int count = 1 + trial % 16;
    std::vector<float> vectors(static_cast<std::size_t>(count * testing::kSumLanes));
    for (float& x : vectors) {
      x = (unit(random) < 0.5f ? -1.0f : 1.0f) * std::exp2(exponent(random));
      if (trial % 7 == 0 && unit(random) < 0.05f) x = specials[random() % 5];
    }
    float tree[16], one_by_one[16];
    testing::avx512_lane_sums(vectors.data(), count, tree, one_by_one);
    for (int i = 0; i < count; ++i) {
      // A NaN's sign and payload are not the compiler's to keep (it may swap an addition's operands).
      if (std::isnan(one_by_one[i])) {
        ASSERT_TRUE(std::isnan(tree[i])) << "trial " << trial << ", vector " << i << " of " << count;
      } else {
        ASSERT_EQ(std::memcmp(&tree[i], &one_by_one[i], sizeof(float)), 0)
            << "trial " << trial << ", vector " << i << " of " << count << ": " << tree[i] << " vs " << one_by_one[i];
      }
    }
  }
}

// Decoding stores its scores straight from that tree's register, scaled, row by row
// (Avx512Isa::reduce_add_each_by_row): each must equal the scaled one-vector sum bit for bit, and
// nothing past a row's keys may be written (the rows lie in one score buffer).
TEST(Targets, Avx512LaneSumsByRowEqualScaledOneVectorSumsBitForBit) {
  if (!missing_cpu_feature(Target::avx512).empty()) {
    GTEST_SKIP() << "the reduction tree is not run here: this CPU lacks " << missing_cpu_feature(Target::avx512);
  }
  std::mt19937 random(16);
  std::uniform_real_distribution<float> exponent(-30.0f, 30.0f), unit(0.0f, 1.0f);
  constexpr int kStride = 21;  // odd, as a score row's start is not aligned either
  for (int rows = 1; rows <= 16; ++rows)
    for (int keys = 1; rows * keys <= 16; ++keys)
      for (int trial = 0; trial < 50; ++trial) {
        std::vector<float> vectors(static_cast<std::size_t>(rows * keys * testing::kSumLanes));
        for (float& x : vectors) x = (unit(random) < 0.5f ? -1.0f : 1.0f) * std::exp2(exponent(random));
        if (trial % 5 == 0) vectors[random() % vectors.size()] = std::numeric_limits<float>::infinity();
        const float scale = 0.088388f * std::exp2(exponent(random) / 10);
        float tree[16], one_by_one[16];
        testing::avx512_lane_sums(vectors.data(), rows * keys, tree, one_by_one);
        std::vector<float> out(static_cast<std::size_t>(rows * kStride), -7.0f);
        testing::avx512_lane_sums_by_row(vectors.data(), rows, keys, scale, out.data(), kStride);
        for (int r = 0; r < rows; ++r)
          for (int c = 0; c < kStride; ++c) {
            const float got = out[static_cast<std::size_t>(r * kStride + c)];
            if (c >= keys) {
              ASSERT_EQ(got, -7.0f) << rows << " rows, " << keys << " keys: row " << r << " written at " << c;
              continue;
            }
            const float want = one_by_one[c * rows + r] * scale;
            ASSERT_EQ(std::memcmp(&got, &want, sizeof(float)), 0)
                << rows << " rows, " << keys << " keys, trial " << trial << ": row " << r << " key " << c << ": "
                << got << " vs " << want;
          }
      }
}

}  // namespace
}  // namespace attnkit
