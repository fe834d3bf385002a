// The check of OpenBLAS's core (attnkit/blas.hpp): judge_blas_core on every core name OpenBLAS 0.3.21
// gives on x86 (and the generic, unknown and foreign ones) against every kind of CPU, including Zen
// on an AVX2 CPU without AVX-512 and Prescott on an AVX-512 Xeon; and projection_blas(), which
// applies it to this process's OpenBLAS.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "attnkit/blas.hpp"

namespace {

using attnkit::BlasCoreKind;
using attnkit::BlasCoreVerdict;
using attnkit::CpuVectorFeatures;
using attnkit::judge_blas_core;

constexpr CpuVectorFeatures kNoAvx2{false, false};     // an SSE or AVX-only CPU (or not x86)
constexpr CpuVectorFeatures kAvx2{true, false};        // Haswell to Alder Lake, Zen 1 to 3 (this machine)
constexpr CpuVectorFeatures kAvx512{true, true};       // Skylake-SP and later Xeons, Zen 4 and 5
constexpr CpuVectorFeatures kAvx512Only{false, true};  // no such CPU ships; AVX-512F still decides

const std::vector<std::string> kPreAvx2 = {"Katmai",  "Coppermine", "Northwood",  "Prescott",     "Banias",
                                           "Atom",    "Core2",      "Penryn",     "Dunnington",   "Nehalem",
                                           "Athlon",  "Opteron",    "Opteron_SSE3", "Opteron(SSE3)", "Barcelona",
                                           "Bobcat",  "Nano",       "Sandybridge", "Bulldozer",   "Piledriver",
                                           "Steamroller", "Excavator"};
const std::vector<std::string> kGeneric = {"", "generic", "Unknown", "GENERIC"};
const std::vector<std::string> kAvx2Cores = {"Haswell", "Zen"};
const std::vector<std::string> kAvx512Cores = {"SkylakeX", "Cooperlake", "SapphireRapids"};
const std::vector<std::string> kOther = {"NeoverseN1", "POWER10", "Zen5", "Haswell2", "x"};

void expect_fine(const BlasCoreVerdict& v, BlasCoreKind kind) {
  EXPECT_EQ(v.kind, kind);
  EXPECT_FALSE(v.generic);
  EXPECT_EQ(v.coretype, "");
  EXPECT_EQ(v.message, "");
}

void expect_generic(const BlasCoreVerdict& v, BlasCoreKind kind, const std::string& core, const std::string& coretype) {
  EXPECT_EQ(v.kind, kind);
  EXPECT_TRUE(v.generic);
  EXPECT_EQ(v.coretype, coretype);
  EXPECT_NE(v.message.find("OPENBLAS_CORETYPE=" + coretype), std::string::npos) << v.message;
  EXPECT_NE(v.message.find("'" + (core.empty() ? std::string("(unnamed)") : core) + "'"), std::string::npos)
      << v.message;
  EXPECT_NE(v.message.find(coretype == "SkylakeX" ? "AVX-512F" : "AVX2 and FMA"), std::string::npos) << v.message;
}

TEST(BlasCore, PreAvx2CoresAreGenericOnCapableCpus) {
  for (const std::string& core : kPreAvx2) {
    SCOPED_TRACE(core);
    expect_generic(judge_blas_core(core, kAvx2), BlasCoreKind::pre_avx2, core, "Haswell");
    expect_generic(judge_blas_core(core, kAvx512), BlasCoreKind::pre_avx2, core, "SkylakeX");
    expect_generic(judge_blas_core(core, kAvx512Only), BlasCoreKind::pre_avx2, core, "SkylakeX");
    expect_fine(judge_blas_core(core, kNoAvx2), BlasCoreKind::pre_avx2);  // nothing better to run there
  }
}

TEST(BlasCore, GenericAndUnknownAreGenericOnCapableCpus) {
  for (const std::string& core : kGeneric) {
    SCOPED_TRACE("'" + core + "'");
    expect_generic(judge_blas_core(core, kAvx2), BlasCoreKind::generic, core, "Haswell");
    expect_generic(judge_blas_core(core, kAvx512), BlasCoreKind::generic, core, "SkylakeX");
    expect_fine(judge_blas_core(core, kNoAvx2), BlasCoreKind::generic);
  }
}

TEST(BlasCore, VectorCoresAreNeverGeneric) {
  for (const CpuVectorFeatures cpu : {kNoAvx2, kAvx2, kAvx512, kAvx512Only}) {
    for (const std::string& core : kAvx2Cores) expect_fine(judge_blas_core(core, cpu), BlasCoreKind::avx2);
    for (const std::string& core : kAvx512Cores) expect_fine(judge_blas_core(core, cpu), BlasCoreKind::avx512);
    // Names this check does not know are not judged: a newer OpenBLAS may know the CPU better.
    for (const std::string& core : kOther) expect_fine(judge_blas_core(core, cpu), BlasCoreKind::other);
  }
}

TEST(BlasCore, NamesAreComparedWithoutCase) {
  expect_generic(judge_blas_core("prescott", kAvx512), BlasCoreKind::pre_avx2, "prescott", "SkylakeX");
  expect_generic(judge_blas_core("CORE2", kAvx2), BlasCoreKind::pre_avx2, "CORE2", "Haswell");
  expect_fine(judge_blas_core("HASWELL", kAvx2), BlasCoreKind::avx2);
  expect_fine(judge_blas_core("skylakex", kAvx512), BlasCoreKind::avx512);
}

// Two real machines: an AMD Zen 3 (OpenBLAS 0.3.21 picks Zen) and a Xeon (family 6, model 207,
// AVX-512) on which it falls back to Prescott.
TEST(BlasCore, ZenAndAvx512XeonMachines) {
  expect_fine(judge_blas_core("Zen", kAvx2), BlasCoreKind::avx2);
  const BlasCoreVerdict xeon = judge_blas_core("Prescott", kAvx512);
  expect_generic(xeon, BlasCoreKind::pre_avx2, "Prescott", "SkylakeX");
  // With the advice followed, the verdict clears.
  expect_fine(judge_blas_core(xeon.coretype, kAvx512), BlasCoreKind::avx512);
  expect_fine(judge_blas_core(judge_blas_core("Prescott", kAvx2).coretype, kAvx2), BlasCoreKind::avx2);
}

TEST(BlasCore, KindNames) {
  EXPECT_STREQ(attnkit::blas_core_kind_name(BlasCoreKind::avx512), "avx512");
  EXPECT_STREQ(attnkit::blas_core_kind_name(BlasCoreKind::avx2), "avx2");
  EXPECT_STREQ(attnkit::blas_core_kind_name(BlasCoreKind::pre_avx2), "pre_avx2");
  EXPECT_STREQ(attnkit::blas_core_kind_name(BlasCoreKind::generic), "generic");
  EXPECT_STREQ(attnkit::blas_core_kind_name(BlasCoreKind::other), "other");
}

// This process's OpenBLAS: whatever core it picked here, the verdict is judge_blas_core's on it.
TEST(BlasCore, ProjectionBlasJudgesThisProcesssCore) {
  const attnkit::ProjectionBlas blas = attnkit::projection_blas();
  EXPECT_NE(blas.config.find("OpenBLAS"), std::string::npos) << blas.config;
  EXPECT_NE(blas.config.find(blas.core), std::string::npos) << "the config names the core: " << blas.config;
  const BlasCoreVerdict expected = judge_blas_core(blas.core, attnkit::cpu_vector_features());
  EXPECT_EQ(blas.verdict.kind, expected.kind) << blas.core;
  EXPECT_EQ(blas.verdict.generic, expected.generic) << blas.core;
  EXPECT_EQ(blas.verdict.coretype, expected.coretype);
  EXPECT_EQ(blas.verdict.message, expected.message);
}

TEST(BlasCore, CpuVectorFeaturesAreTheCpus) {
  const CpuVectorFeatures cpu = attnkit::cpu_vector_features();
#if defined(__x86_64__) || defined(__i386__)
  EXPECT_EQ(cpu.avx2_fma, __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"));
  EXPECT_EQ(cpu.avx512f, static_cast<bool>(__builtin_cpu_supports("avx512f")));
#else
  EXPECT_FALSE(cpu.avx2_fma);
  EXPECT_FALSE(cpu.avx512f);
#endif
}

}  // namespace
