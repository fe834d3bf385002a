// `attnkit bench`: not its timings (benchmarks are programs, never timed tests) but what its figures
// rest on: the two baselines compute attention correctly (against the float64 reference), the case
// list and FLOP counts are the documented ones (the backward's 2.5× the forward's, the module's
// projections and causal attention), --json prints parseable lines with the documented keys (each
// target's FMA loop, the best of them as every fraction_of_peak's denominator, the SIMD target of
// every row, the verdict on OpenBLAS's core), and bad usage exits 2.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "attnkit/attnkit.hpp"
#include "bench/blas_attention.hpp"
#include "bench/cases.hpp"
#include "bench/ceilings.hpp"
#include "bench/json_line.hpp"
#include "bench/kernel_target.hpp"
#include "bench/module_cases.hpp"
#include "bench/naive_attention.hpp"
#include "bench/report.hpp"
#include "cli.hpp"
#include "cli/cli_runner.hpp"
#include "support/testing.hpp"

namespace {

using Result = attnkit::testing::CliResult;
Result cli(const std::vector<std::string>& args) { return attnkit::testing::run_cli(args); }

using attnkit::DType;
using attnkit::Tensor;
using attnkit::bench::AttentionShape;

constexpr int kOk = 0, kUsage = 2;

// f32 arithmetic over d <= 24 products and m <= 64 softmax weights of N(0, 1) inputs stays below
// ~1e-5 of the float64 result; 1e-4 leaves room without hiding a wrong mask or a wrong head.
constexpr double kF32Tolerance = 1e-4;

// ---- baselines against the float64 reference ----

struct BaselineCase {
  AttentionShape shape;
  int threads;
  std::int64_t rows_per_block;  // small values cut heads into several blocks with a short tail
};

std::string describe(const BaselineCase& c) {
  const AttentionShape& s = c.shape;
  std::ostringstream text;
  text << "B" << s.batch << " H" << s.heads << "/" << s.kv_heads << " n" << s.n << " m" << s.m << " d" << s.d_k << ","
       << s.d_v << (s.causal ? " causal" : "") << " threads " << c.threads << " rows/block " << c.rows_per_block;
  return text.str();
}

const std::vector<BaselineCase> kBaselineCases = {
    {{2, 4, 2, 37, 37, 16, 24, false}, 3, 7},   // GQA, d_v != d_k, odd sizes
    {{2, 4, 2, 37, 37, 16, 24, true}, 3, 7},    // the same, causal (top-left)
    {{1, 3, 3, 5, 41, 8, 8, false}, 2, 256},    // n < m, one block per head
    {{1, 2, 1, 50, 20, 12, 12, true}, 2, 16},   // n > m causal: late rows see every key (MQA)
    {{1, 1, 1, 64, 64, 24, 24, true}, 1, 64},   // one thread, one block
    {{1, 32, 8, 1, 63, 16, 16, false}, 2, 1},   // decode: one query per head over 8 KV heads
};

struct Problem {
  Tensor q, k, v;  // f32, [B, H, S, D]
  Tensor expected;  // f64 reference output
};

Problem make_problem(const AttentionShape& s, std::uint64_t salt) {
  attnkit::testing::Rng rng(salt);
  Problem p;
  p.q = attnkit::testing::random_tensor(rng, {s.batch, s.heads, s.n, s.d_k}, DType::f32);
  p.k = attnkit::testing::random_tensor(rng, {s.batch, s.kv_heads, s.m, s.d_k}, DType::f32);
  p.v = attnkit::testing::random_tensor(rng, {s.batch, s.kv_heads, s.m, s.d_v}, DType::f32);
  attnkit::AttentionOptions options;
  options.causal = s.causal ? attnkit::Causal::top_left : attnkit::Causal::none;
  options.kernel = attnkit::Kernel::reference;
  const Tensor q64 = Tensor::converted(p.q.view(), DType::f64), k64 = Tensor::converted(p.k.view(), DType::f64),
               v64 = Tensor::converted(p.v.view(), DType::f64);
  p.expected = attnkit::testing::run_forward(q64, k64, v64, options).out;
  return p;
}

template <class Baseline>
void expect_matches_reference(const char* name) {
  ATTNKIT_TRACE_SEED();
  std::uint64_t salt = 0;
  for (const BaselineCase& c : kBaselineCases) {
    SCOPED_TRACE(std::string(name) + ": " + describe(c));
    const Problem p = make_problem(c.shape, ++salt);
    Tensor out = attnkit::testing::poisoned(DType::f32, p.expected.shape());
    Baseline baseline(c.shape, c.threads, c.rows_per_block);
    baseline.run(p.q.data<float>(), p.k.data<float>(), p.v.data<float>(), out.data<float>());
    EXPECT_LE(attnkit::testing::max_abs_diff(Tensor::converted(out.view(), DType::f64), p.expected), kF32Tolerance);
  }
}

TEST(BenchBaselines, NaiveMatchesReference) { expect_matches_reference<attnkit::bench::NaiveAttention>("naive"); }

TEST(BenchBaselines, OpenBlasCompositionMatchesReference) {
  const attnkit::bench::BlasInfo info = attnkit::bench::BlasAttention::info();
  if (!info.available) GTEST_SKIP() << info.description;
  EXPECT_FALSE(info.core.empty());
  const attnkit::BlasCoreVerdict expected = attnkit::judge_blas_core(info.core, attnkit::cpu_vector_features());
  EXPECT_EQ(info.verdict.generic, expected.generic) << info.core;
  EXPECT_EQ(info.verdict.kind, expected.kind) << info.core;
  EXPECT_EQ(info.verdict.coretype, expected.coretype) << info.core;
  expect_matches_reference<attnkit::bench::BlasAttention>("openblas");
}

// ---- the best FMA rate over the targets' loops ----

TEST(BenchCeilings, BestFmaIsTheMaximumPerThreadCount) {
  using attnkit::bench::FmaLoopPeak;
  const std::vector<FmaLoopPeak> loops = {
      {"avx2", "avx2+fma", std::vector<double>{100, 190, 50}, ""},
      {"avx512", "avx512f", std::vector<double>{160, 180, 50}, ""},  // 50: a tie goes to the first listed
      {"other", "unmeasured", std::nullopt, "absent"},
  };
  std::vector<double> gflops;
  std::vector<std::string> isa;
  attnkit::bench::take_best_fma(loops, 3, gflops, isa);
  EXPECT_EQ(gflops, (std::vector<double>{160, 190, 50}));
  EXPECT_EQ(isa, (std::vector<std::string>{"avx512f", "avx2+fma", "avx2+fma"}));
  attnkit::bench::take_best_fma({loops[2]}, 2, gflops, isa);  // nothing measured: no rate, no name
  EXPECT_EQ(gflops, (std::vector<double>{0, 0}));
  EXPECT_EQ(isa, (std::vector<std::string>{"", ""}));
}

// The CPU's flags as Linux lists them ("flags : fpu vme ..."), empty where there is no /proc/cpuinfo.
std::vector<std::string> cpuinfo_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::vector<std::string> flags;
    for (std::string flag; words >> flag;) flags.push_back(flag);
    return flags;
  }
  return {};
}

// The AMX ceiling is measured exactly on CPUs that Linux says have AMX-BF16 tiles (unless the kernel
// refuses them, which the note must then say), and there it runs the tiles: far above the best f32
// FMA loop (13× on a Xeon of model 207), which no loop without them comes near.
TEST(BenchCeilings, AmxTilePeakIsMeasuredWhereLinuxListsTheTiles) {
  const std::vector<std::string> flags = cpuinfo_flags();
  if (flags.empty()) GTEST_SKIP() << "no /proc/cpuinfo flags line: nothing to compare the AMX detection with";
  const auto listed = [&](const char* flag) { return std::find(flags.begin(), flags.end(), flag) != flags.end(); };
  std::string why_not;
  const auto amx = attnkit::bench::measure_amx_bf16_peak({1}, 1, why_not);
  if (!listed("amx_tile") || !listed("amx_bf16")) {
    EXPECT_FALSE(amx.has_value());
    EXPECT_NE(why_not.find("no AMX-BF16"), std::string::npos) << why_not;
    return;
  }
  if (!amx) {
    EXPECT_NE(why_not.find("arch_prctl"), std::string::npos) << "listed tiles not measured must say why: " << why_not;
    return;
  }
  ASSERT_EQ(amx->gflops.size(), 1u);
  std::vector<double> fma;
  std::vector<std::string> isa;
  attnkit::bench::take_best_fma(attnkit::bench::measure_fma_peaks({1}, 1), 1, fma, isa);
  EXPECT_GT(amx->gflops[0], 2.0 * fma[0]) << "AMX " << amx->gflops[0] << " GFLOP/s, best FMA loop " << fma[0];
}

// ---- cases and FLOP counts ----

TEST(BenchCases, FullListCoversEveryShapeAndDtype) {
  attnkit::bench::CaseSelection sel;
  sel.threads = {1, 2};
  const auto cases = attnkit::bench::select_cases(sel);
  // forward: 4 sizes × 2 dims × causal or not × 2 thread counts × 3 dtypes (f32, bf16, f16);
  // backward: the same in 2 dtypes (f32, bf16); decode: 2 sizes × 2 thread counts × 9 caches
  // (f32, bf16, f16, the quantized int8, int4, fp8_e4m3, fp8_e5m2, and int8 and int4 with keys per
  // channel)
  EXPECT_EQ(cases.size(), std::size_t{4 * 2 * 2 * 2 * 3 + 4 * 2 * 2 * 2 * 2 + 2 * 2 * 9});
  std::map<std::string, int> names;
  for (const auto& c : cases) ++names[c.name];
  EXPECT_EQ(names["fwd_f32_n8192_d128_causal"], 2);  // once per thread count
  EXPECT_EQ(names["fwd_f16_n1024_d64"], 2);
  EXPECT_EQ(names["bwd_f16_n1024_d64"], 0);
  EXPECT_EQ(names["bwd_bf16_n512_d64"], 2);
  EXPECT_EQ(names["decode_bf16_m32768_d128"], 2);
  EXPECT_EQ(names["decode_f16_m32768_d128"], 2);
  EXPECT_EQ(names["decode_int8_m32768_d128"], 2);
  EXPECT_EQ(names["decode_int4_m4096_d128"], 2);
  EXPECT_EQ(names["decode_fp8_e4m3_m32768_d128"], 2);
  EXPECT_EQ(names["decode_fp8_e5m2_m4096_d128"], 2);
  EXPECT_EQ(names["decode_int4_per_channel_m32768_d128"], 2);
  EXPECT_EQ(names["decode_int8_per_channel_m4096_d128"], 2);
  int backward = 0;
  for (const auto& c : cases) {
    if (c.kind == attnkit::bench::CaseKind::backward) {
      ++backward;
      // the forward case of the same shape, dtype and threads is in the list too, and comes first
      const attnkit::bench::BenchCase twin = c.forward_counterpart();
      EXPECT_EQ(twin.kind, attnkit::bench::CaseKind::forward);
      EXPECT_EQ(twin.name, "fwd" + c.name.substr(3)) << c.name;
      EXPECT_EQ(names[twin.name], 2) << twin.name;
    }
    if (c.kind != attnkit::bench::CaseKind::decode) continue;
    EXPECT_EQ(c.shape.heads, 32);
    EXPECT_EQ(c.shape.kv_heads, 8);
    EXPECT_EQ(c.shape.n, 1);
  }
  EXPECT_EQ(backward, 4 * 2 * 2 * 2 * 2);
}

TEST(BenchCases, QuickHasOneSmallBackwardCase) {
  attnkit::bench::CaseSelection sel;
  sel.quick = true;
  sel.threads = {1, 2};
  std::map<std::string, int> backward;
  for (const auto& c : attnkit::bench::select_cases(sel)) {
    if (c.kind == attnkit::bench::CaseKind::backward) ++backward[c.name];
  }
  EXPECT_EQ(backward, (std::map<std::string, int>{{"bwd_f32_n256_d64", 2}}));  // once per thread count
}

TEST(BenchCases, FilterBwdSelectsTheBackward) {
  attnkit::bench::CaseSelection sel;
  sel.threads = {1};
  sel.filter = "bwd";
  const auto cases = attnkit::bench::select_cases(sel);
  EXPECT_EQ(cases.size(), std::size_t{4 * 2 * 2 * 2});
  for (const auto& c : cases) EXPECT_EQ(c.kind, attnkit::bench::CaseKind::backward) << c.name;
}

TEST(BenchCases, FilterAndOverrides) {
  attnkit::bench::CaseSelection sel;
  sel.threads = {2};
  sel.sizes = {100};
  sel.dims = {32};
  sel.filter = "fwd_bf16_n100_d32_causal";
  const auto cases = attnkit::bench::select_cases(sel);
  ASSERT_EQ(cases.size(), 1u);
  EXPECT_EQ(cases[0].dtype, DType::bf16);
  EXPECT_TRUE(cases[0].shape.causal);
  EXPECT_EQ(cases[0].shape.n, 100);
  EXPECT_EQ(cases[0].threads, 2);
}

TEST(BenchCases, FlopsAndBytesFollowTheDesignNotes) {
  attnkit::bench::BenchCase c;
  c.shape = {1, 8, 8, 512, 512, 64, 64, false};
  EXPECT_DOUBLE_EQ(c.flops(), 4.0 * 512 * 512 * 64 * 8);  // 4·n·m·d per head
  c.shape.causal = true;
  EXPECT_DOUBLE_EQ(c.flops(), 2.0 * 512 * 512 * 64 * 8);  // halved for causal
  c.kind = attnkit::bench::CaseKind::backward;
  EXPECT_DOUBLE_EQ(c.flops(), 2.5 * 2.0 * 512 * 512 * 64 * 8);  // backward: 2.5× the forward, causal halved
  c.shape.causal = false;
  EXPECT_DOUBLE_EQ(c.flops(), 2.5 * c.forward_counterpart().flops());
  c.kind = attnkit::bench::CaseKind::decode;
  c.shape = {1, 32, 8, 1, 4096, 128, 128, false};
  c.dtype = DType::bf16;
  EXPECT_DOUBLE_EQ(c.kv_bytes(), 8.0 * 4096 * (128 + 128) * 2);  // K and V of 8 KV heads, 2 bytes each
}

// ---- module cases ----

TEST(BenchModuleCases, FullListIsALlamaLikeLayer) {
  attnkit::bench::CaseSelection sel;
  sel.threads = {1, 2};
  const auto cases = attnkit::bench::select_module_cases(sel);
  // prefill n = 2048; decode m in {4096, 32768} × {paged, contiguous}, and paged over int8 and int4
  // caches; each on 2 thread counts
  ASSERT_EQ(cases.size(), std::size_t{(1 + 2 * 2 + 2 * 2) * 2});
  std::map<std::string, int> names;
  for (const auto& c : cases) {
    ++names[c.name];
    EXPECT_EQ(c.layer.embed_dim, 4096) << c.name;
    EXPECT_EQ(c.layer.num_heads, 32) << c.name;
    EXPECT_EQ(c.layer.num_kv_heads, 8) << c.name;
    EXPECT_EQ(c.layer.head_dim, 128) << c.name;
    if (c.kind == attnkit::bench::ModuleKind::prefill) {
      EXPECT_EQ(c.layout, attnkit::KVCacheLayout::contiguous);
      EXPECT_EQ(c.context, 0);
    } else {
      EXPECT_EQ(c.tokens, 1) << "a decode step is one token";
    }
  }
  EXPECT_EQ(names, (std::map<std::string, int>{{"mha_prefill_f32_n2048_e4096", 2},
                                               {"mha_decode_f32_m4096_e4096_paged", 2},
                                               {"mha_decode_f32_m4096_e4096_contiguous", 2},
                                               {"mha_decode_f32_m32768_e4096_paged", 2},
                                               {"mha_decode_f32_m32768_e4096_contiguous", 2},
                                               {"mha_decode_int8_m4096_e4096_paged", 2},
                                               {"mha_decode_int4_m4096_e4096_paged", 2},
                                               {"mha_decode_int8_m32768_e4096_paged", 2},
                                               {"mha_decode_int4_m32768_e4096_paged", 2}}));
  EXPECT_EQ(cases.front().kind, attnkit::bench::ModuleKind::prefill) << "prefill first, then decode";
}

TEST(BenchModuleCases, QuickIsASmallerLayerAndSizesOverride) {
  attnkit::bench::CaseSelection sel;
  sel.quick = true;
  sel.threads = {1};
  std::vector<std::string> names;
  for (const auto& c : attnkit::bench::select_module_cases(sel)) {
    names.push_back(c.name);
    EXPECT_EQ(c.layer.embed_dim, 1024);
    EXPECT_EQ(c.layer.num_heads, 8);
    EXPECT_EQ(c.layer.num_kv_heads, 2);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"mha_prefill_f32_n256_e1024", "mha_decode_f32_m1024_e1024_paged",
                                             "mha_decode_f32_m1024_e1024_contiguous"}));
  sel.sizes = {40};
  sel.dims = {8};  // not the module's: d belongs to the layer
  sel.filter = "mha_decode";
  const auto decode = attnkit::bench::select_module_cases(sel);
  ASSERT_EQ(decode.size(), 2u);
  EXPECT_EQ(decode[0].name, "mha_decode_f32_m40_e1024_paged");
  EXPECT_EQ(decode[0].context, 40);
  EXPECT_EQ(decode[0].layer.head_dim, 128);
}

TEST(BenchModuleCases, FlopsAndBytesCountProjectionsAndAttention) {
  attnkit::bench::ModuleCase c;
  c.layer = {4096, 32, 8, 128};
  c.kind = attnkit::bench::ModuleKind::prefill;
  c.tokens = 2048;
  const double n = 2048, e = 4096, hd = 32 * 128, kvd = 8 * 128;
  const double projections = 2 * n * e * (hd + 2 * kvd) + 2 * n * hd * e;
  EXPECT_DOUBLE_EQ(c.attention_flops(), 4 * n * n * 128 * 32 / 2);  // causal: halved
  EXPECT_DOUBLE_EQ(c.flops(), projections + c.attention_flops());
  EXPECT_DOUBLE_EQ(c.bytes(), 0.0) << "a prefill is reported against the FMA peak only";

  c.kind = attnkit::bench::ModuleKind::decode;
  c.tokens = 1;
  c.context = 32768;
  EXPECT_DOUBLE_EQ(c.attention_flops(), 4.0 * 32768 * 128 * 32);
  EXPECT_DOUBLE_EQ(c.flops(), 2 * e * (hd + 2 * kvd) + 2 * hd * e + c.attention_flops());
  EXPECT_DOUBLE_EQ(c.bytes(), (e * (hd + 2 * kvd) + hd * e) * 4 + 32768.0 * kvd * 2 * 4);  // weights, K and V
}

TEST(BenchVarlenCases, MixedLengthsQuickAndOverrides) {
  attnkit::bench::CaseSelection sel;
  sel.threads = {1, 2};
  const auto cases = attnkit::bench::select_varlen_cases(sel);
  ASSERT_EQ(cases.size(), 4u);  // causal or not × 2 thread counts
  EXPECT_EQ(cases[0].name, "varlen_f32_b16_mixed_d128");
  EXPECT_EQ(cases[3].name, "varlen_f32_b16_mixed_d128_causal");
  for (const auto& c : cases) {
    ASSERT_EQ(c.lengths.size(), 16u);
    EXPECT_EQ(c.lengths, cases[0].lengths) << "one fixed draw";
    for (std::int64_t l : c.lengths) EXPECT_TRUE(l >= 64 && l <= 4096) << l;
    EXPECT_EQ(c.heads, 8);
    EXPECT_EQ(c.d, 128);
  }
  sel.quick = true;
  for (const auto& c : attnkit::bench::select_varlen_cases(sel)) {
    EXPECT_EQ(c.name.substr(0, 25), "varlen_f32_b16_short_d128");
    for (std::int64_t l : c.lengths) EXPECT_TRUE(l >= 64 && l <= 1024) << l;
  }
  sel.sizes = {24, 640};
  sel.dims = {8};
  sel.filter = "causal";
  const auto small = attnkit::bench::select_varlen_cases(sel);
  ASSERT_EQ(small.size(), 2u);
  EXPECT_EQ(small[0].name, "varlen_f32_b16_upto640_d8_causal");
  for (std::int64_t l : small[0].lengths) EXPECT_TRUE(l >= 10 && l <= 640) << l;
}

TEST(BenchBatchDecodeCases, MixedLengthsEveryCacheDtypeBf16First) {
  attnkit::bench::CaseSelection sel;
  sel.threads = {1, 2};
  const auto cases = attnkit::bench::select_batch_decode_cases(sel);
  ASSERT_EQ(cases.size(), 14u);  // 7 cache dtypes × 2 thread counts
  const std::vector<std::string> order = {"bf16", "bf16", "f32",      "f32",      "f16",      "f16",      "int8",
                                          "int8", "int4", "int4",     "fp8_e4m3", "fp8_e4m3", "fp8_e5m2", "fp8_e5m2"};
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    EXPECT_EQ(c.name, "decode_batch_" + order[i] + "_b32_mixed_d128");
    EXPECT_EQ(c.group, "b32_mixed_d128");
    EXPECT_EQ(c.threads, i % 2 == 0 ? 1 : 2) << "each dtype on every thread count, one cache for both";
    ASSERT_EQ(c.lengths.size(), 32u);
    EXPECT_EQ(c.lengths, cases[0].lengths) << "one fixed draw";
    for (std::int64_t l : c.lengths) EXPECT_TRUE(l >= 512 && l <= 32768) << l;
    EXPECT_EQ(c.heads, 32);
    EXPECT_EQ(c.kv_heads, 8);
    EXPECT_EQ(c.d, 128);
    EXPECT_EQ(c.block_size, 16);
  }
  sel.quick = true;
  for (const auto& c : attnkit::bench::select_batch_decode_cases(sel)) {
    EXPECT_NE(c.name.find("_b32_short_d128"), std::string::npos) << c.name;
    for (std::int64_t l : c.lengths) EXPECT_TRUE(l >= 64 && l <= 1024) << l;
  }
  sel.sizes = {24, 640};
  sel.dims = {8};
  const auto small = attnkit::bench::select_batch_decode_cases(sel);
  ASSERT_EQ(small.size(), 6u) << "no quantized cache at d = 8, not a whole block";
  EXPECT_EQ(small[0].name, "decode_batch_bf16_b32_upto640_d8");
  for (std::int64_t l : small[0].lengths) EXPECT_TRUE(l >= 10 && l <= 640) << l;
  sel.dims = {};
  sel.filter = "decode_batch_int4";
  const auto int4 = attnkit::bench::select_batch_decode_cases(sel);
  ASSERT_EQ(int4.size(), 2u);
  EXPECT_EQ(int4[0].dtype, DType::int4);
}

TEST(BenchBatchDecodeCases, BytesAndFlopsCountEveryCachedToken) {
  attnkit::bench::BatchDecodeCase c;
  c.lengths = {3, 5};
  c.heads = 4;
  c.kv_heads = 2;
  c.d = 32;
  c.dtype = DType::bf16;
  EXPECT_EQ(c.tokens(), 8);
  EXPECT_DOUBLE_EQ(c.kv_bytes(), 8.0 * 2 * 2 * 32 * 2);  // tokens × KV heads × (K, V) × d × 2 bytes
  c.dtype = DType::int4;
  EXPECT_DOUBLE_EQ(c.kv_bytes(), 8.0 * 2 * 2 * static_cast<double>(attnkit::quantized_row_bytes(DType::int4, 32)));
  EXPECT_DOUBLE_EQ(c.flops(), 4.0 * 4 * 32 * 8);  // 4·d per query head and cached token
}

TEST(BenchVarlenCases, FlopsOfThePackedEqualAndPaddedRuns) {
  attnkit::bench::VarlenCase c;
  c.lengths = {2, 4, 4};
  c.heads = 3;
  c.d = 5;
  EXPECT_DOUBLE_EQ(c.flops(), 4.0 * 3 * 5 * (4 + 16 + 16));
  EXPECT_EQ(c.equal_length(), 3);  // sqrt(36 / 3) = 3.46 rounds to 3
  EXPECT_DOUBLE_EQ(c.equal_flops(), 4.0 * 3 * 5 * 3 * 9);
  EXPECT_DOUBLE_EQ(c.padded_flops(), 4.0 * 3 * 5 * (4 * 2 + 4 * 4 + 4 * 4));  // 4 queries over each one's keys
  c.causal = true;
  EXPECT_DOUBLE_EQ(c.flops(), 4.0 * 3 * 5 * (4 + 16 + 16) / 2);
  EXPECT_DOUBLE_EQ(c.padded_flops(), 4.0 * 3 * 5 * ((2.0 + 2 * 2) + 8 + 8));  // l²/2 + (4 − l)·l
}

TEST(BenchJson, LinesAreOneObjectWithEscapedStringsAndRoundedNumbers) {
  const std::string line = attnkit::bench::JsonLine()
                               .text("name", "a\"b\\c\n\x01")
                               .number("seconds", 1.0 / 3.0)
                               .number("nan", std::nan(""))
                               .integer("n", -7)
                               .boolean("ok", true)
                               .null("none")
                               .numbers("xs", {2.5, INFINITY})
                               .integers("is", {1, 2})
                               .texts("ts", {"x", "\xff"})
                               .str();
  EXPECT_EQ(line, R"({"name": "a\"b\\c\n\u0001", "seconds": 0.333333, "nan": null, "n": -7, "ok": true, )"
                  R"("none": null, "xs": [2.5, null], "is": [1, 2], "ts": ["x", ")" "\xEF\xBF\xBD" R"("]})");  // bad UTF-8: U+FFFD
}

// ---- every --json line parsed by nlohmann/json (strict: one object, nothing after it) ----

using JsonObject = nlohmann::json;

std::vector<JsonObject> json_lines(const std::string& text) {
  std::vector<JsonObject> objects;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    JsonObject object = JsonObject::parse(line, nullptr, false);  // no exception: discarded on error
    EXPECT_TRUE(object.is_object()) << "not a JSON object: " << line;
    objects.push_back(object.is_object() ? std::move(object) : JsonObject::object());
  }
  return objects;
}

std::string text_of(const JsonObject& o, const std::string& key) {
  const auto it = o.find(key);
  return it != o.end() && it->is_string() ? it->get<std::string>() : "";
}

bool is_null(const JsonObject& o, const std::string& key) {
  const auto it = o.find(key);
  return it != o.end() && it->is_null();
}

double number_of(const JsonObject& o, const std::string& key) {
  const auto it = o.find(key);
  return it != o.end() && it->is_number() ? it->get<double>() : std::nan("");
}

// The key's boolean; fails the test when it is missing or not a boolean.
bool bool_of(const JsonObject& o, const std::string& key) {
  const auto it = o.find(key);
  const bool is_bool = it != o.end() && it->is_boolean();
  EXPECT_TRUE(is_bool) << key << " is not a boolean";
  return is_bool && it->get<bool>();
}

// The key's array of numbers (empty when missing, null or not an array of numbers).
std::vector<double> numbers_of(const JsonObject& o, const std::string& key) {
  std::vector<double> values;
  const auto it = o.find(key);
  if (it == o.end() || !it->is_array()) return values;
  for (const auto& v : *it) values.push_back(v.is_number() ? v.get<double>() : std::nan(""));
  return values;
}

std::vector<std::string> texts_of(const JsonObject& o, const std::string& key) {
  std::vector<std::string> values;
  const auto it = o.find(key);
  if (it == o.end() || !it->is_array()) return values;
  for (const auto& v : *it) values.push_back(v.is_string() ? v.get<std::string>() : "(not a string)");
  return values;
}

constexpr double kJsonDigits = 1e-5;  // JSON numbers carry 6 significant digits

// The ceilings line's FMA figures: each x86 target's loop measured exactly when this CPU has its
// instructions (else null with a reason), and fma_gflops the best of them per thread count, named
// by fma_best_isa.
void expect_fma_ceilings(const JsonObject& ceilings, std::size_t counts) {
  const attnkit::CpuVectorFeatures cpu = attnkit::cpu_vector_features();
  struct Loop {
    std::string key, isa;
    bool expected;
  };
  const std::vector<Loop> loops = {{"avx2", "avx2+fma", cpu.avx2_fma},
                                   {"avx512", "avx512f", cpu.avx512f},
                                   {"generic", "generic", !cpu.avx2_fma && !cpu.avx512f}};
  std::vector<double> best(counts, 0.0);
  std::vector<std::string> best_isa(counts);
  for (const Loop& loop : loops) {
    SCOPED_TRACE(loop.key);
    const std::string key = "fma_" + loop.key + "_gflops";
    if (!loop.expected) {
      if (loop.key != "generic") {
        EXPECT_TRUE(is_null(ceilings, key)) << "the CPU lacks it: null, not a figure";
        EXPECT_FALSE(text_of(ceilings, "fma_" + loop.key + "_note").empty()) << "and says why";
      } else {
        EXPECT_EQ(ceilings.count(key), 0u) << "the generic floor runs only when no target loop can";
      }
      continue;
    }
    const std::vector<double> rates = numbers_of(ceilings, key);
    ASSERT_EQ(rates.size(), counts) << "one per thread count";
    EXPECT_EQ(ceilings.count("fma_" + loop.key + "_note"), 0u);
    for (std::size_t i = 0; i < counts; ++i) {
      EXPECT_GT(rates[i], 0.0);
      if (rates[i] > best[i]) {
        best[i] = rates[i];
        best_isa[i] = loop.isa;
      }
    }
  }
  const std::vector<double> fma = numbers_of(ceilings, "fma_gflops");
  const std::vector<std::string> fma_best_isa = texts_of(ceilings, "fma_best_isa");
  ASSERT_EQ(fma.size(), counts);
  ASSERT_EQ(fma_best_isa.size(), counts);
  for (std::size_t i = 0; i < counts; ++i) {
    EXPECT_NEAR(fma[i] / best[i], 1.0, kJsonDigits) << "fma_gflops is the best measured rate at count " << i;
    EXPECT_TRUE(fma_best_isa[i].starts_with(best_isa[i])) << fma_best_isa[i] << " vs " << best_isa[i];
    EXPECT_NE(text_of(ceilings, "fma_isa").find(fma_best_isa[i]), std::string::npos) << text_of(ceilings, "fma_isa");
  }
}

// The ceilings line's verdict on OpenBLAS's core is judge_blas_core's on the core it names, for
// this CPU.
void expect_blas_verdict(const JsonObject& ceilings) {
  const attnkit::CpuVectorFeatures cpu = attnkit::cpu_vector_features();
  EXPECT_EQ(bool_of(ceilings, "cpu_avx2_fma"), cpu.avx2_fma);
  EXPECT_EQ(bool_of(ceilings, "cpu_avx512f"), cpu.avx512f);
  const std::string core = text_of(ceilings, "blas_core");
  EXPECT_FALSE(core.empty()) << "the module's OpenBLAS names its core even without the baseline";
  if (bool_of(ceilings, "openblas")) {
    EXPECT_EQ(core, text_of(ceilings, "openblas_core"));
  }
  const attnkit::BlasCoreVerdict verdict = attnkit::judge_blas_core(core, cpu);
  EXPECT_EQ(text_of(ceilings, "blas_core_kind"), attnkit::blas_core_kind_name(verdict.kind));
  EXPECT_EQ(bool_of(ceilings, "blas_core_generic"), verdict.generic) << core;
  if (verdict.generic) {
    EXPECT_EQ(text_of(ceilings, "blas_coretype_advice"), verdict.coretype);
    EXPECT_EQ(text_of(ceilings, "blas_core_warning"), verdict.message);
  } else {
    EXPECT_TRUE(is_null(ceilings, "blas_coretype_advice"));
    EXPECT_TRUE(is_null(ceilings, "blas_core_warning"));
  }
}

// The target the library runs a row's call on: the active one, except that a tile target runs only
// the calls of bf16 q, k and v (forward and backward) on its tiles, and on an f16 tile target the
// forward of f16 ones, and the rest on its vector target. Module rows' dtype is their cache's, under
// f32 queries: never all bf16 or f16.
std::string expected_target(const JsonObject& o) {
  const attnkit::Target active = attnkit::active_target();
  const bool module = text_of(o, "kind").rfind("mha_", 0) == 0;
  const bool f16_forward = text_of(o, "dtype") == "f16" && text_of(o, "direction") == "forward" && !module &&
                           attnkit::target_uses_f16_tiles(active);
  const bool on_tiles = (text_of(o, "dtype") == "bf16" && !module) || f16_forward;
  return attnkit::target_name(on_tiles ? active : attnkit::tile_vector_target(active));
}

// A case or module line names the SIMD target its kernel ran on, null for the reference.
void expect_target(const JsonObject& o) {
  ASSERT_TRUE(o.count("target")) << "every row names its target";
  if (text_of(o, "kernel") == "fast") {
    EXPECT_EQ(text_of(o, "target"), expected_target(o));
  } else {
    EXPECT_TRUE(is_null(o, "target")) << text_of(o, "kernel");
  }
}

// fraction_of_peak is gflops over the best f32 FMA rate at the line's thread count.
void expect_fraction_of_best(const JsonObject& o, const JsonObject& ceilings) {
  const std::vector<double> threads = numbers_of(ceilings, "threads"), fma = numbers_of(ceilings, "fma_gflops");
  const auto it = std::find(threads.begin(), threads.end(), number_of(o, "threads"));
  ASSERT_NE(it, threads.end());
  const double peak = fma[static_cast<std::size_t>(it - threads.begin())];
  EXPECT_NEAR(number_of(o, "fraction_of_peak") / (number_of(o, "gflops") / peak), 1.0, 3 * kJsonDigits);
}

// A decode line's fractions of bandwidth are its gbytes_per_s over the ceilings' copy and read rates at
// its thread count.
void expect_fractions_of_bandwidths(const JsonObject& o, const JsonObject& ceilings) {
  const std::vector<double> threads = numbers_of(ceilings, "threads");
  const auto it = std::find(threads.begin(), threads.end(), number_of(o, "threads"));
  ASSERT_NE(it, threads.end());
  const auto at = static_cast<std::size_t>(it - threads.begin());
  const double copy = numbers_of(ceilings, "copy_gbytes_per_s").at(at), read = numbers_of(ceilings, "read_gbytes_per_s").at(at);
  EXPECT_GT(read, 0.0);
  EXPECT_NEAR(number_of(o, "fraction_of_bandwidth") / (number_of(o, "gbytes_per_s") / copy), 1.0, 3 * kJsonDigits);
  EXPECT_NEAR(number_of(o, "fraction_of_read_bandwidth") / (number_of(o, "gbytes_per_s") / read), 1.0, 3 * kJsonDigits);
}

// Tiny shapes, one repeat, a small copy: the whole run takes well under a second of work.
std::vector<std::string> tiny_run(const std::string& threads, const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"bench",   "--quick", "--sizes", "24", "--dims",     "8",
                                   "--threads", threads, "--repeat", "1", "--copy-mib", "4"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

TEST(BenchCommand, JsonLinesCarryTheDocumentedKeys) {
  const Result r = cli(tiny_run("1,2", {"--json"}));
  ASSERT_EQ(r.code, kOk) << r.err;
  const std::vector<JsonObject> lines = json_lines(r.out);
  // ceilings + forward (2 causal × 2 threads × 2 dtypes) + backward (--quick: f32, not causal, 2 threads)
  // + decode (2 threads × 3 cache dtypes: no int8 or int4 at d = 8, not a whole block) + module (prefill and 2 decode layouts, --sizes 24, × 2
  // threads) + varlen (2 causal × 2 threads) + batched decoding (3 cache dtypes at d = 8 × 2 threads)
  // + peak memory
  ASSERT_EQ(lines.size(), 1u + 8u + 2u + 6u + 6u + 4u + 6u + 1u) << r.out;

  const JsonObject& ceilings = lines.front();
  EXPECT_EQ(text_of(ceilings, "kind"), "ceilings");
  for (const char* key : {"fma_isa", "fma_gflops", "fma_best_isa", "fma_avx2_gflops", "fma_avx512_gflops",
                          "bf16_gflops", "amx_bf16_gflops", "copy_gbytes_per_s", "read_gbytes_per_s", "threads", "openblas_core", "cpu_avx2_fma",
                          "cpu_avx512f", "blas_core", "blas_core_kind", "blas_core_generic", "blas_coretype_advice",
                          "blas_core_warning"}) {
    EXPECT_TRUE(ceilings.count(key)) << key;
  }
  const auto& fma = ceilings.at("fma_gflops");
  ASSERT_EQ(fma.size(), 2u);  // one per thread count
  for (const auto& v : fma) EXPECT_GT(v.get<double>(), 0.0);
  expect_fma_ceilings(ceilings, 2);
  expect_blas_verdict(ceilings);

  const bool openblas = ceilings.at("openblas").get<bool>();
  int forward = 0, backward = 0, decode = 0, module = 0, varlen = 0, batches = 0;
  for (std::size_t i = 1; i + 1 < lines.size(); ++i) {
    const JsonObject& o = lines[i];
    SCOPED_TRACE(text_of(o, "name"));
    expect_target(o);
    expect_fraction_of_best(o, ceilings);
    if (text_of(o, "kind") == "varlen") {  // checked in detail by VarlenLinesCarryTheDocumentedKeys
      ++varlen;
      EXPECT_EQ(number_of(o, "d"), 8.0) << "--dims sets d";
      continue;
    }
    if (text_of(o, "kind") == "decode_batch") {  // checked in detail by BatchDecodeLinesCarryTheDocumentedKeys
      ++batches;
      EXPECT_EQ(number_of(o, "d"), 8.0) << "--dims sets d";
      continue;
    }
    if (text_of(o, "kind").starts_with("mha_")) {  // checked in detail by ModuleLinesCarryTheDocumentedKeys
      ++module;
      EXPECT_EQ(number_of(o, text_of(o, "kind") == "mha_decode" ? "m" : "n"), 24.0) << "--sizes sets n and m";
      EXPECT_EQ(number_of(o, "d"), 128.0) << "--dims is not the module's";
      continue;
    }
    for (const char* key : {"name", "direction", "batch", "heads", "kv_heads", "n", "m", "d", "causal", "dtype",
                            "threads", "seconds", "gflops", "fraction_of_peak", "kernel", "target",
                            "speedup_vs_naive"}) {
      EXPECT_TRUE(o.count(key)) << key;
    }
    const bool is_backward = text_of(o, "kind") == "backward";
    EXPECT_EQ(text_of(o, "direction"), is_backward ? "backward" : "forward");
    EXPECT_EQ(o.count("vs_forward"), is_backward ? 1u : 0u);
    EXPECT_EQ(o.count("speedup_vs_openblas"), openblas || is_backward ? 1u : 0u);
    EXPECT_GT(number_of(o, "seconds"), 0.0);
    EXPECT_GT(number_of(o, "fraction_of_peak"), 0.0);
    EXPECT_EQ(number_of(o, "d"), 8.0);
    const std::string dtype = text_of(o, "dtype");
    const bool is_decode = text_of(o, "kind") == "decode";
    EXPECT_TRUE(dtype == "f32" || dtype == "bf16" || (is_decode && dtype == "f16")) << dtype;
    if (is_backward) {
      ++backward;
      EXPECT_EQ(text_of(o, "name").substr(0, 4), "bwd_");
      EXPECT_TRUE(is_null(o, "speedup_vs_naive")) << "the baselines are forward-only";
      EXPECT_TRUE(is_null(o, "speedup_vs_openblas"));
    } else if (is_decode) {
      ++decode;
      EXPECT_EQ(number_of(o, "m"), 24.0);
      EXPECT_EQ(number_of(o, "kv_heads"), 8.0);
      EXPECT_GT(number_of(o, "gbytes_per_s"), 0.0);
      EXPECT_GT(number_of(o, "fraction_of_bandwidth"), 0.0);
      expect_fractions_of_bandwidths(o, ceilings);
    } else {
      ++forward;
      EXPECT_EQ(text_of(o, "kind"), "forward");
      EXPECT_EQ(number_of(o, "n"), 24.0);
    }
  }
  EXPECT_EQ(forward, 8);
  EXPECT_EQ(backward, 2);
  EXPECT_EQ(decode, 6);
  EXPECT_EQ(module, 6);
  EXPECT_EQ(varlen, 4);
  EXPECT_EQ(batches, 6);
  EXPECT_EQ(text_of(lines.back(), "kind"), "peak_memory");
  EXPECT_FALSE(text_of(lines.back(), "skipped").empty()) << "--quick never runs the 65536-long call";
}

// The backward line of a run whose forward was filtered out: the forward is timed anyway, and
// vs_forward is the ratio of the two rates, i.e. 2.5 × forward_seconds / seconds.
void expect_backward_line(const JsonObject& o, const std::string& name, double forward_flops) {
  SCOPED_TRACE(name);
  EXPECT_EQ(text_of(o, "name"), name);
  EXPECT_EQ(text_of(o, "kind"), "backward");
  EXPECT_EQ(text_of(o, "direction"), "backward");
  EXPECT_DOUBLE_EQ(number_of(o, "flops"), 2.5 * forward_flops);
  const double seconds = number_of(o, "seconds"), forward_seconds = number_of(o, "forward_seconds");
  const double vs_forward = number_of(o, "vs_forward");
  EXPECT_GT(seconds, 0.0);
  EXPECT_GT(forward_seconds, 0.0);
  ASSERT_TRUE(std::isfinite(vs_forward) && vs_forward > 0.0) << vs_forward;
  constexpr double kSixDigits = 1e-4;  // JSON numbers carry 6 significant digits
  EXPECT_NEAR(vs_forward / (2.5 * forward_seconds / seconds), 1.0, kSixDigits);
  EXPECT_NEAR(vs_forward / (number_of(o, "gflops") / number_of(o, "forward_gflops")), 1.0, kSixDigits);
  EXPECT_GT(number_of(o, "fraction_of_peak"), 0.0);
  EXPECT_FALSE(text_of(o, "kernel").empty());
}

TEST(BenchCommand, BackwardLinesCarryDirectionAndVsForward) {
  const Result r = cli(tiny_run("1", {"--json", "--filter", "bwd"}));
  ASSERT_EQ(r.code, kOk) << r.err;
  const std::vector<JsonObject> lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;  // ceilings and --quick's one backward case
  expect_backward_line(lines[1], "bwd_f32_n24_d8", 4.0 * 24 * 24 * 8 * 8);
  EXPECT_EQ(text_of(lines[1], "kernel"), text_of(lines[0], "kernel"));

  // Outside --quick: bf16 and causal (FLOPs halved), with the forward timed for the ratio.
  const Result full = cli({"bench", "--sizes", "24", "--dims", "8", "--threads", "1", "--repeat", "1", "--copy-mib",
                           "4", "--json", "--filter", "bwd_bf16_n24_d8_causal"});
  ASSERT_EQ(full.code, kOk) << full.err;
  const std::vector<JsonObject> full_lines = json_lines(full.out);
  ASSERT_EQ(full_lines.size(), 2u) << full.out;
  expect_backward_line(full_lines[1], "bwd_bf16_n24_d8_causal", 2.0 * 24 * 24 * 8 * 8);
  EXPECT_EQ(text_of(full_lines[1], "dtype"), "bf16");
}

// The quick module cases, as the help documents their lines: the layer, tokens/s and the attention
// share, which must be a share of the module's own time.
TEST(BenchCommand, ModuleLinesCarryTheDocumentedKeys) {
  const Result r = cli({"bench", "--quick", "--filter", "mha_", "--threads", "1", "--repeat", "1", "--copy-mib", "4",
                        "--json"});
  ASSERT_EQ(r.code, kOk) << r.err;
  const std::vector<JsonObject> lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 4u) << r.out;  // ceilings, prefill, decode paged and contiguous; no peak memory
  EXPECT_EQ(text_of(lines[1], "name"), "mha_prefill_f32_n256_e1024");
  EXPECT_EQ(text_of(lines[2], "name"), "mha_decode_f32_m1024_e1024_paged");
  EXPECT_EQ(text_of(lines[3], "name"), "mha_decode_f32_m1024_e1024_contiguous");
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const JsonObject& o = lines[i];
    SCOPED_TRACE(text_of(o, "name"));
    for (const char* key : {"kind", "direction", "name", "batch", "embed_dim", "heads", "kv_heads", "d", "n", "m",
                            "causal", "dtype", "layout", "threads", "seconds", "runs", "tokens_per_second", "flops",
                            "gflops", "fraction_of_peak", "kernel", "target", "attention_seconds",
                            "attention_share"}) {
      EXPECT_TRUE(o.count(key)) << key;
    }
    const bool decode = text_of(o, "kind") == "mha_decode";
    EXPECT_EQ(text_of(o, "kind"), decode ? "mha_decode" : "mha_prefill");
    EXPECT_EQ(text_of(o, "direction"), "forward");
    EXPECT_EQ(text_of(o, "dtype"), "f32");
    EXPECT_EQ(number_of(o, "embed_dim"), 1024.0);
    EXPECT_EQ(number_of(o, "heads"), 8.0);
    EXPECT_EQ(number_of(o, "kv_heads"), 2.0);
    EXPECT_EQ(number_of(o, "d"), 128.0);
    EXPECT_EQ(number_of(o, "threads"), 1.0);
    EXPECT_FALSE(text_of(o, "kernel").empty());
    const double seconds = number_of(o, "seconds"), share = number_of(o, "attention_share");
    EXPECT_GT(seconds, 0.0);
    EXPECT_GT(number_of(o, "tokens_per_second"), 0.0);
    EXPECT_NEAR(number_of(o, "tokens_per_second") * seconds / number_of(o, "n"), 1.0, 1e-4);  // 6 digits
    EXPECT_GT(number_of(o, "fraction_of_peak"), 0.0);
    EXPECT_GT(number_of(o, "attention_seconds"), 0.0);
    EXPECT_GT(share, 0.0);
    // The share is the ratio of two medians, each timed on its own: on a loaded machine (or under a
    // sanitizer, with one repeat) attention alone can come out slower than the whole step, so only
    // its definition is checked, not a bound that timing noise can break.
    EXPECT_NEAR(share, number_of(o, "attention_seconds") / seconds, 1e-3 * share);
    EXPECT_EQ(o.count("bytes"), decode ? 1u : 0u);
    EXPECT_EQ(o.count("gbytes_per_s"), decode ? 1u : 0u);
    EXPECT_EQ(o.count("fraction_of_bandwidth"), decode ? 1u : 0u);
    EXPECT_EQ(o.count("fraction_of_read_bandwidth"), decode ? 1u : 0u);
    if (decode) {
      EXPECT_EQ(number_of(o, "n"), 1.0);
      EXPECT_EQ(number_of(o, "m"), 1024.0);
      EXPECT_GT(number_of(o, "gbytes_per_s"), 0.0);
      EXPECT_GT(number_of(o, "fraction_of_bandwidth"), 0.0);
      expect_fractions_of_bandwidths(o, lines.front());
      const bool paged = text_of(o, "layout") == "paged";
      EXPECT_EQ(text_of(o, "layout"), paged ? "paged" : "contiguous");
      if (paged) {
        EXPECT_EQ(number_of(o, "block_size"), 16.0);
      } else {
        EXPECT_EQ(o.count("block_size"), 0u);
      }
    } else {
      EXPECT_EQ(number_of(o, "n"), 256.0);
      EXPECT_EQ(number_of(o, "m"), 256.0);
      EXPECT_EQ(text_of(o, "layout"), "contiguous");
    }
  }
}

// The SIMD target of every row is the one the kernels run on now: forcing another (as ATTNKIT_TARGET
// or set_target does) changes it, and the reference kernel has none. (f32 rows: a tile target's
// vector target.)
TEST(BenchCommand, RowsNameTheTargetTheKernelsRanOn) {
  const std::vector<attnkit::Target> supported = attnkit::supported_targets();
  ASSERT_FALSE(supported.empty());
  for (const attnkit::Target target : {supported.front(), supported.back()}) {
    SCOPED_TRACE(attnkit::target_name(target));
    attnkit::set_target(target);
    const Result r = cli(tiny_run("1", {"--json", "--filter", "f32_n24_d8"}));
    const Result module = cli(tiny_run("1", {"--json", "--filter", "mha_prefill"}));
    attnkit::reset_target();
    ASSERT_EQ(r.code, kOk) << r.err;
    ASSERT_EQ(module.code, kOk) << module.err;
    const std::vector<JsonObject> lines = json_lines(r.out), module_lines = json_lines(module.out);
    ASSERT_EQ(lines.size(), 4u) << r.out;  // ceilings, fwd_f32_n24_d8, fwd_f32_n24_d8_causal, bwd_f32_n24_d8
    ASSERT_EQ(module_lines.size(), 2u) << module.out;
    for (const JsonObject& o : {lines[1], lines[2], lines[3], module_lines[1]}) {
      SCOPED_TRACE(text_of(o, "name"));
      EXPECT_EQ(text_of(o, "kernel"), "fast");
      EXPECT_EQ(text_of(o, "target"), attnkit::target_name(attnkit::tile_vector_target(target)));
    }
  }
  const Result reference = cli(tiny_run("1", {"--json", "--filter", "fwd_f32_n24_d8_causal", "--kernel", "reference"}));
  ASSERT_EQ(reference.code, kOk) << reference.err;
  const std::vector<JsonObject> lines = json_lines(reference.out);
  ASSERT_EQ(lines.size(), 2u) << reference.out;
  EXPECT_EQ(text_of(lines[1], "kernel"), "reference");
  EXPECT_TRUE(is_null(lines[1], "target")) << "the float64 reference has no SIMD target";
}

// Forces an emulated tile target for a scope where the CPU runs it; why_not() says why not.
class EmulatedTileTarget {
 public:
  explicit EmulatedTileTarget(attnkit::Target tiles) {
    const std::vector<attnkit::Target> supported = attnkit::supported_targets();
    if (std::find(supported.begin(), supported.end(), tiles) != supported.end()) {
      attnkit::set_target(tiles);
    } else {
      const std::string lacks = attnkit::missing_cpu_feature(tiles);
      why_not_ = std::string(attnkit::target_name(tiles)) + " does not run here: " +
                 (lacks.empty() ? "not compiled in" : "the CPU lacks " + lacks);
    }
  }
  ~EmulatedTileTarget() {
    if (why_not_.empty()) attnkit::reset_target();
  }
  EmulatedTileTarget(const EmulatedTileTarget&) = delete;
  EmulatedTileTarget& operator=(const EmulatedTileTarget&) = delete;
  const std::string& why_not() const { return why_not_; }

 private:
  std::string why_not_;
};

// With a tile target active, only calls of bf16 q, k and v name it, forward and backward, and on an
// f16 tile target the forward of f16 ones: other calls name its vector target, where the library
// runs them.
TEST(BenchTarget, TileTargetNamesTheVectorTargetOffTheTiles) {
  using attnkit::Kernel, attnkit::Pass, attnkit::bench::target_of;
  for (attnkit::Target t : {attnkit::Target::amx_bf16_emulated, attnkit::Target::amx_fp16_emulated}) {
    const EmulatedTileTarget tiles(t);
    if (!tiles.why_not().empty()) GTEST_SKIP() << tiles.why_not();
    const std::string on_tiles = attnkit::target_name(t), vectors = "avx512_emulated";
    const std::string f16_forward = attnkit::target_uses_f16_tiles(t) ? on_tiles : vectors;
    for (Pass pass : {Pass::forward, Pass::backward}) {
      EXPECT_EQ(target_of(Kernel::fast, DType::bf16, DType::bf16, DType::bf16, pass), on_tiles);
      EXPECT_EQ(target_of(Kernel::fast, DType::f32, DType::f32, DType::f32, pass), vectors);
      EXPECT_EQ(target_of(Kernel::fast, DType::f32, DType::int8, DType::int8, pass), vectors);
      EXPECT_EQ(target_of(Kernel::fast, DType::bf16, DType::bf16, DType::f32, pass), vectors);
      EXPECT_EQ(target_of(Kernel::reference, DType::bf16, DType::bf16, DType::bf16, pass), std::nullopt);
    }
    EXPECT_EQ(target_of(Kernel::fast, DType::f16, DType::f16, DType::f16, Pass::forward), f16_forward);
    EXPECT_EQ(target_of(Kernel::fast, DType::f16, DType::f16, DType::f16, Pass::backward), vectors);
  }
}

// The same through the command: each row of a run on the tile target names the target its call ran on.
TEST(BenchTarget, TileTargetRowsNameWhereEachCallRan) {
  const EmulatedTileTarget tiles(attnkit::Target::amx_fp16_emulated);
  if (!tiles.why_not().empty()) GTEST_SKIP() << tiles.why_not();
  std::vector<std::string> args = tiny_run("1", {"--json", "--filter", "_d32", "--no-naive", "--no-openblas"});
  args[5] = "32";  // --dims 32: int8 and int4 caches need whole blocks of 32
  std::vector<std::string> full = args;
  full.erase(full.begin() + 1);  // outside --quick: bf16 backward cases too
  const Result r = cli(full);
  const Result module = cli(tiny_run("1", {"--json", "--filter", "mha_prefill", "--no-naive", "--no-openblas"}));
  ASSERT_EQ(r.code, kOk) << r.err;
  ASSERT_EQ(module.code, kOk) << module.err;
  std::map<std::string, std::string> targets;  // by case name
  for (const std::string* out : {&r.out, &module.out}) {
    const std::vector<JsonObject> lines = json_lines(*out);
    for (std::size_t i = 1; i < lines.size(); ++i) {
      if (!lines[i].count("target")) continue;  // peak memory
      SCOPED_TRACE(text_of(lines[i], "name"));
      expect_target(lines[i]);
      targets[text_of(lines[i], "name")] = text_of(lines[i], "target");
    }
  }
  const std::string on_tiles = "amx_fp16_emulated", vectors = "avx512_emulated";
  for (const auto& [name, target] :
       {std::pair{"fwd_bf16_n24_d32", on_tiles}, std::pair{"decode_bf16_m24_d32", on_tiles},
        std::pair{"fwd_f32_n24_d32", vectors}, std::pair{"bwd_bf16_n24_d32", on_tiles},
        std::pair{"decode_f16_m24_d32", on_tiles}, std::pair{"decode_int8_m24_d32", vectors},
        std::pair{"mha_prefill_f32_n24_e1024", vectors}, std::pair{"varlen_f32_b16_upto24_d32", vectors}}) {
    ASSERT_TRUE(targets.count(name)) << name << " in:\n" << r.out;
    EXPECT_EQ(targets[name], target) << name;
  }
}

// The varlen lines, as the help documents them: the lengths, and ratios consistent with the seconds.
TEST(BenchCommand, VarlenLinesCarryTheDocumentedKeys) {
  const Result r = cli(tiny_run("1,2", {"--json", "--filter", "varlen", "--no-naive", "--no-openblas"}));
  ASSERT_EQ(r.code, kOk) << r.err;
  const std::vector<JsonObject> lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 5u) << r.out;  // ceilings, then causal or not × 2 thread counts
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const JsonObject& o = lines[i];
    SCOPED_TRACE(text_of(o, "name"));
    for (const char* key : {"kind", "direction", "name", "batch", "heads", "kv_heads", "d", "causal", "dtype", "threads",
                            "lengths", "lengths_seed", "equal_length", "padded_length", "seconds", "runs", "flops",
                            "gflops", "fraction_of_peak", "equal_seconds", "equal_gflops", "rate_vs_equal",
                            "padded_seconds", "time_vs_padded", "work_vs_padded", "masked_seconds", "time_vs_masked",
                            "speedup_vs_one_thread", "kernel", "target"}) {
      EXPECT_TRUE(o.count(key)) << key;
    }
    EXPECT_EQ(text_of(o, "kind"), "varlen");
    EXPECT_EQ(number_of(o, "batch"), 16.0);
    EXPECT_EQ(o.at("lengths").size(), 16u);
    EXPECT_LE(number_of(o, "padded_length"), 24.0);
    constexpr double kSixDigits = 1e-4;  // JSON numbers carry 6 significant digits
    EXPECT_NEAR(number_of(o, "time_vs_padded") * number_of(o, "padded_seconds") / number_of(o, "seconds"), 1.0, kSixDigits);
    EXPECT_NEAR(number_of(o, "time_vs_masked") * number_of(o, "masked_seconds") / number_of(o, "seconds"), 1.0, kSixDigits);
    EXPECT_NEAR(number_of(o, "rate_vs_equal") * number_of(o, "equal_gflops") / number_of(o, "gflops"), 1.0, kSixDigits);
    const bool one_thread = number_of(o, "threads") == 1.0;
    EXPECT_EQ(is_null(o, "speedup_vs_one_thread"), one_thread) << "the 2-thread row has the ratio, the 1-thread row none";
  }
}

// The machine lines for a CPU this one may not be: a generic OpenBLAS core on an AVX-512 CPU (a Xeon
// on which OpenBLAS 0.3.21 picks Prescott), and a target loop that did not run. The Report is fed
// made-up ceilings.
TEST(BenchReport, GenericBlasCoreIsSaidInTextAndJson) {
  attnkit::bench::Ceilings c;
  c.threads = {1, 2};
  c.fma_loops = {{"avx2", "avx2+fma", std::vector<double>{80, 160}, ""},
                 {"avx512", "avx512f", std::nullopt, "this CPU has no avx512f"}};
  attnkit::bench::take_best_fma(c.fma_loops, 2, c.fma_gflops, c.fma_best_isa);
  c.fma_isa = "avx2+fma";
  c.bf16_note = "no avx512_bf16";
  c.copy_gbytes_per_s = {20, 30};
  attnkit::bench::RunInfo info;
  info.kernel = "fast";
  info.openblas = {true, "OpenBLAS 0.3.21, core Prescott", "Prescott", {}};
  info.cpu = {true, true};
  info.blas_core = "Prescott";
  info.blas_verdict = attnkit::judge_blas_core("Prescott", info.cpu);

  std::ostringstream text;
  attnkit::bench::Report(text, false).machine(info, c);
  for (const char* part : {"avx2+fma loop:  1 thread 80.0 GFLOP/s  2 threads 160.0 GFLOP/s",
                           "avx512f loop: not measured: this CPU has no avx512f",
                           "OpenBLAS core: Prescott (pre_avx2 kernels) on a CPU with AVX2+FMA, AVX-512F: a GENERIC "
                           "core",
                           "WARNING: OpenBLAS runs its 'Prescott' core", "OPENBLAS_CORETYPE=SkylakeX"}) {
    EXPECT_NE(text.str().find(part), std::string::npos) << part << " in:\n" << text.str();
  }

  std::ostringstream json;
  attnkit::bench::Report(json, true).machine(info, c);
  const std::vector<JsonObject> lines = json_lines(json.str());
  ASSERT_EQ(lines.size(), 1u);
  const JsonObject& o = lines[0];
  EXPECT_TRUE(bool_of(o, "blas_core_generic"));
  EXPECT_EQ(text_of(o, "blas_core_kind"), "pre_avx2");
  EXPECT_EQ(text_of(o, "blas_coretype_advice"), "SkylakeX");
  EXPECT_NE(text_of(o, "blas_core_warning").find("OPENBLAS_CORETYPE=SkylakeX"), std::string::npos);
  EXPECT_EQ(numbers_of(o, "fma_avx2_gflops"), (std::vector<double>{80, 160}));
  EXPECT_TRUE(is_null(o, "fma_avx512_gflops"));
  EXPECT_EQ(text_of(o, "fma_avx512_note"), "this CPU has no avx512f");
  EXPECT_EQ(texts_of(o, "fma_best_isa"), (std::vector<std::string>{"avx2+fma", "avx2+fma"}));

  // And the same machine with OpenBLAS's own choice right: no warning, no advice.
  info.blas_core = "SkylakeX";
  info.blas_verdict = attnkit::judge_blas_core("SkylakeX", info.cpu);
  std::ostringstream fine_text, fine_json;
  attnkit::bench::Report(fine_text, false).machine(info, c);
  attnkit::bench::Report(fine_json, true).machine(info, c);
  EXPECT_EQ(fine_text.str().find("WARNING"), std::string::npos) << fine_text.str();
  EXPECT_NE(fine_text.str().find("OpenBLAS core: SkylakeX (avx512 kernels)"), std::string::npos) << fine_text.str();
  const JsonObject fine = json_lines(fine_json.str()).at(0);
  EXPECT_FALSE(bool_of(fine, "blas_core_generic"));
  EXPECT_TRUE(is_null(fine, "blas_coretype_advice"));
}

// Made-up ceilings of an AVX-512 machine with AMX tiles, at 1 and 2 threads.
attnkit::bench::Ceilings tile_machine_ceilings(std::vector<double> fma, std::vector<double> bf16, std::vector<double> amx) {
  attnkit::bench::Ceilings c;
  c.threads = {1, 2};
  c.fma_loops = {{"avx512", "avx512f", std::move(fma), ""}};
  attnkit::bench::take_best_fma(c.fma_loops, 2, c.fma_gflops, c.fma_best_isa);
  c.bf16_gflops = std::move(bf16);
  c.amx_bf16_gflops = std::move(amx);
  c.copy_gbytes_per_s = {20, 30};
  c.read_gbytes_per_s = {12, 24};
  return c;
}

TEST(BenchReport, AmxTilePeakIsSaidInTextAndJsonOrWhyNot) {
  attnkit::bench::Ceilings c = tile_machine_ceilings({170, 340}, {85, 170}, {2300, 4000});
  attnkit::bench::RunInfo info;
  info.kernel = "fast";

  std::ostringstream text, json;
  attnkit::bench::Report(text, false).machine(info, c);
  attnkit::bench::Report(json, true).machine(info, c);
  EXPECT_NE(text.str().find("bf16 tile peak (AMX tdpbf16ps; \"of AMX\" of bf16 cases is of it, and of f16 cases on f16 tiles)"), std::string::npos)
      << text.str();
  EXPECT_NE(text.str().find("1 thread 2300.0 GFLOP/s  2 threads 4000.0 GFLOP/s"), std::string::npos) << text.str();
  EXPECT_EQ(numbers_of(json_lines(json.str()).at(0), "amx_bf16_gflops"), (std::vector<double>{2300, 4000}));

  c.amx_bf16_gflops.reset();
  c.amx_bf16_note = "this CPU has no AMX-BF16 tiles (amx-tile, amx-bf16)";
  std::ostringstream without_text, without_json;
  attnkit::bench::Report(without_text, false).machine(info, c);
  attnkit::bench::Report(without_json, true).machine(info, c);
  EXPECT_NE(without_text.str().find("bf16 tile peak (AMX): not available: this CPU has no AMX-BF16 tiles"),
            std::string::npos)
      << without_text.str();
  const JsonObject o = json_lines(without_json.str()).at(0);
  EXPECT_TRUE(is_null(o, "amx_bf16_gflops"));
  EXPECT_EQ(text_of(o, "amx_bf16_note"), c.amx_bf16_note);
}

// The cells of the table row that starts with `name`.
std::vector<std::string> row_cells(const std::string& table, const std::string& name) {
  const std::size_t row = table.find(name + " ");
  if (row == std::string::npos) return {};
  std::istringstream line(table.substr(row, table.find('\n', row) - row));
  std::vector<std::string> cells;
  for (std::string cell; line >> cell;) cells.push_back(cell);
  return cells;
}

// Whether a text report has the "of AMX" column: where the machine lines give the tile rate.
bool has_amx_column(const std::string& table) { return table.find("bf16 tile peak (AMX tdpbf16ps") != std::string::npos; }

// A bf16 case is reported as a fraction of the AMX tile rate at its thread count where that rate was
// measured: a JSON field and an "of AMX" column, "-" on f32 rows; without the rate, neither.
TEST(BenchReport, Bf16CasesAreAFractionOfTheAmxPeak) {
  using attnkit::bench::CaseKind, attnkit::bench::CaseResult;
  attnkit::bench::Ceilings c = tile_machine_ceilings({100, 200}, {50, 100}, {1000, 2000});
  attnkit::bench::RunInfo info;
  info.kernel = "fast";
  // One head, n = m = 1000, d = 125: 4·n·m·d = 5e8 FLOPs in 5 ms on 2 threads, 100 GFLOP/s: half
  // the FMA peak, all of the bf16 dot peak, 5% of the tile rate.
  const auto result = [](DType dtype, const char* name, const char* target) {
    CaseResult r;
    r.bench_case = {name, CaseKind::forward, dtype, AttentionShape{1, 1, 1, 1000, 1000, 125, 125, false}, 2};
    r.kernel = "fast";
    r.target = target;
    r.timing = {0.005, {0.005}};
    r.openblas_note = "--no-openblas";
    return r;
  };
  const CaseResult bf16 = result(DType::bf16, "fwd_bf16_n1000_d125", "amx_bf16");
  const CaseResult f32 = result(DType::f32, "fwd_f32_n1000_d125", "avx512");
  const attnkit::bench::Figures figures = attnkit::bench::figures_of(bf16, c);
  ASSERT_TRUE(figures.fraction_of_amx_peak.has_value());
  EXPECT_NEAR(*figures.fraction_of_amx_peak, 0.05, 1e-12);
  EXPECT_FALSE(attnkit::bench::figures_of(f32, c).fraction_of_amx_peak.has_value()) << "f32 is never on the tiles";
  // f16 rows: of the tile rate where they ran on f16 tiles, never where they ran on vectors.
  const attnkit::bench::Figures f16_tiles = attnkit::bench::figures_of(result(DType::f16, "fwd_f16_n1000_d125", "amx_fp16"), c);
  ASSERT_TRUE(f16_tiles.fraction_of_amx_peak.has_value());
  EXPECT_NEAR(*f16_tiles.fraction_of_amx_peak, 0.05, 1e-12);
  EXPECT_FALSE(f16_tiles.fraction_of_bf16_peak.has_value());
  EXPECT_FALSE(attnkit::bench::figures_of(result(DType::f16, "bwd_f16_n1000_d125", "avx512"), c).fraction_of_amx_peak.has_value())
      << "an f16 row on the vectors";

  const auto report = [&](bool json) {
    std::ostringstream out;
    attnkit::bench::Report r(out, json);
    r.machine(info, c);
    r.result(bf16);
    r.result(f32);
    return out.str();
  };
  const std::string text = report(false);
  EXPECT_NE(text.find("  of peak    of AMX  vs naive"), std::string::npos) << text;
  // case threads seconds GFLOP/s of-peak of-AMX vs-naive vs-BLAS kernel target
  EXPECT_EQ(row_cells(text, "fwd_bf16_n1000_d125"),
            (std::vector<std::string>{"fwd_bf16_n1000_d125", "2", "0.005", "100.0", "50.0%", "5.0%", "-", "-", "fast",
                                      "amx_bf16"}))
      << text;
  EXPECT_EQ(row_cells(text, "fwd_f32_n1000_d125").at(5), "-") << text;
  const std::vector<JsonObject> lines = json_lines(report(true));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_NEAR(number_of(lines[1], "fraction_of_amx_peak"), 0.05, 1e-6);
  EXPECT_NEAR(number_of(lines[1], "fraction_of_bf16_peak"), 1.0, 1e-6);
  EXPECT_EQ(lines[2].count("fraction_of_amx_peak"), 0u) << "f32";

  c.amx_bf16_gflops.reset();
  c.amx_bf16_note = "this CPU has no AMX-BF16 tiles (amx-tile, amx-bf16)";
  const std::string without = report(false);
  EXPECT_EQ(without.find("of AMX"), std::string::npos) << "no column without the tile rate:\n" << without;
  EXPECT_EQ(row_cells(without, "fwd_bf16_n1000_d125").size(), 9u) << without;
  const std::vector<JsonObject> without_lines = json_lines(report(true));
  ASSERT_EQ(without_lines.size(), 3u);
  EXPECT_EQ(without_lines[1].count("fraction_of_amx_peak"), 0u);
  EXPECT_NEAR(number_of(without_lines[1], "fraction_of_bf16_peak"), 1.0, 1e-6) << "the dot peak is still there";
}

TEST(BenchCommand, FilterSelectsByName) {
  // (a substring: "decode_f32" alone would also select mha_decode_f32_m24_e1024_paged and _contiguous)
  const Result r = cli(tiny_run("1", {"--json", "--filter", "decode_f32_m24_d"}));
  ASSERT_EQ(r.code, kOk) << r.err;
  const std::vector<JsonObject> lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;  // ceilings and one decode case; peak memory is not selected
  EXPECT_EQ(text_of(lines[1], "name"), "decode_f32_m24_d8");
}

// int8 and int4 caches (d a whole block of 32): read through a KV cache, their bytes those of the
// quantized rows (codes and float16 scales), so GB/s × seconds is 8 KV heads × 24 tokens × 2 rows of
// 34 bytes (int8) or 20 bytes (int4); keys quantised per channel take the same bytes.
TEST(BenchCommand, QuantizedDecodeCasesCountTheRowsBytes) {
  std::vector<std::string> args = tiny_run("1", {"--json", "--filter", "decode_int"});
  args[5] = "32";  // --dims 32
  const Result r = cli(args);
  ASSERT_EQ(r.code, kOk) << r.err;
  const std::vector<JsonObject> lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 5u) << r.out;
  for (const auto& [line, name, record] :
       {std::tuple{1, "decode_int8_m24_d32", 34.0}, std::tuple{2, "decode_int4_m24_d32", 20.0},
        std::tuple{3, "decode_int8_per_channel_m24_d32", 34.0}, std::tuple{4, "decode_int4_per_channel_m24_d32", 20.0}}) {
    const JsonObject& o = lines[static_cast<std::size_t>(line)];
    EXPECT_EQ(text_of(o, "name"), name);
    EXPECT_EQ(text_of(o, "kernel"), "fast");
    EXPECT_NEAR(number_of(o, "gbytes_per_s") * 1e9 * number_of(o, "seconds") / (8 * 24 * 2 * record), 1.0, 1e-3) << name;
  }
}

TEST(BenchCommand, DecodeRowsGiveBothBandwidthFractions) {
  const Result r = cli(tiny_run("1", {"--filter", "decode_f32_m24_d"}));
  ASSERT_EQ(r.code, kOk) << r.err;
  EXPECT_NE(r.out.find("read bandwidth (4 MiB, bytes read):  1 thread "), std::string::npos) << r.out;
  const std::vector<std::string> cells = row_cells(r.out, "decode_f32_m24_d8");
  // case threads seconds GFLOP/s of-peak [of-AMX] GB/s of-bandw. of-read vs-naive vs-BLAS kernel target
  const std::size_t amx = has_amx_column(r.out) ? 1 : 0;
  ASSERT_EQ(cells.size(), 12u + amx) << r.out;
  for (const std::size_t at : {std::size_t{4}, 6 + amx, 7 + amx}) EXPECT_EQ(cells[at].back(), '%') << r.out;
}

TEST(BenchCommand, TextTableNamesTheColumns) {
  const Result r = cli(tiny_run("1", {"--filter", "f32_n24_d8"}));
  ASSERT_EQ(r.code, kOk) << r.err;
  for (const char* part : {"f32 FMA peak", "copy bandwidth", "read bandwidth", "OpenBLAS", "of peak", "vs naive", "vs BLAS",
                           "fwd_f32_n24_d8_causal", "backward:", "vs fwd", "bwd_f32_n24_d8 ", "  kernel  target\n",
                           "avx2+fma loop:", "avx512f loop:", "OpenBLAS core: "}) {
    EXPECT_NE(r.out.find(part), std::string::npos) << part << " in:\n" << r.out;
  }
  // Each target loop's line has its figures, or says why there are none.
  const attnkit::CpuVectorFeatures cpu = attnkit::cpu_vector_features();
  for (const auto& [name, has] :
       {std::pair{"avx2+fma loop:", cpu.avx2_fma}, std::pair{"avx512f loop:", cpu.avx512f}}) {
    const std::size_t at = r.out.find(name);
    ASSERT_NE(at, std::string::npos) << name;
    const std::string loop_line = r.out.substr(at, r.out.find('\n', at) - at);
    EXPECT_EQ(loop_line.find("1 thread ") != std::string::npos, has) << loop_line;
    EXPECT_EQ(loop_line.find("not measured: ") != std::string::npos, !has) << loop_line;
  }
  // The backward row: its baselines columns read "-" (they are forward-only).
  const std::vector<std::string> row = row_cells(r.out, "bwd_f32_n24_d8");
  // case threads seconds GFLOP/s of-peak [of-AMX, "-" for f32] vs-fwd naive BLAS kernel target
  const std::size_t amx = has_amx_column(r.out) ? 1 : 0;
  ASSERT_EQ(row.size(), 10u + amx) << r.out;
  std::vector<std::string> cells = row;
  if (amx == 1) {
    EXPECT_EQ(row[5], "-") << "f32 is not a fraction of the tiles: " << r.out;
    cells.erase(cells.begin() + 5);
  }
  EXPECT_NE(cells[5], "-") << "vs fwd is measured: " << r.out;
  EXPECT_EQ(cells[6], "-") << r.out;
  EXPECT_EQ(cells[7], "-") << r.out;
  EXPECT_EQ(cells[8], "fast") << r.out;
  EXPECT_EQ(cells[9], attnkit::target_name(attnkit::tile_vector_target(attnkit::active_target()))) << r.out;
}

TEST(BenchCommand, ModuleTableNamesTheColumns) {
  const Result r = cli(tiny_run("1", {"--filter", "mha_"}));
  ASSERT_EQ(r.code, kOk) << r.err;
  for (const char* part : {"module prefill", "module decode", "tokens/s", "attn share", "of peak", "of bandw.", "of read",
                           "mha_prefill_f32_n24_e1024 ", "mha_decode_f32_m24_e1024_paged ",
                           "mha_decode_f32_m24_e1024_contiguous "}) {
    EXPECT_NE(r.out.find(part), std::string::npos) << part << " in:\n" << r.out;
  }
  // A decode row: case threads seconds tokens/s GB/s of-bandw. of-read attn-share kernel target, every figure
  // measured.
  const std::size_t row = r.out.find("mha_decode_f32_m24_e1024_paged ");
  ASSERT_NE(row, std::string::npos);
  std::istringstream line(r.out.substr(row, r.out.find('\n', row) - row));
  std::vector<std::string> cells;
  for (std::string cell; line >> cell;) cells.push_back(cell);
  ASSERT_EQ(cells.size(), 10u) << line.str();
  for (std::size_t i = 1; i < cells.size(); ++i) EXPECT_NE(cells[i], "-") << line.str();
  EXPECT_EQ(cells[5].back(), '%') << "of bandw. is a percentage: " << line.str();
  EXPECT_EQ(cells[6].back(), '%') << "of read is a percentage: " << line.str();
  EXPECT_EQ(cells[7].back(), '%') << "attn share is a percentage: " << line.str();
  EXPECT_EQ(cells[9], attnkit::target_name(attnkit::tile_vector_target(attnkit::active_target()))) << line.str();
}

TEST(BenchCommand, HelpListsFlagsAndAnExample) {
  const Result r = cli({"bench", "--help"});
  EXPECT_EQ(r.code, kOk);
  for (const char* part : {"--quick", "--json", "--filter", "--repeat", "--threads", "--sizes", "bwd_",
                           "vs fwd", "vs_forward", "2.5", "env -u OPENBLAS_CORETYPE", "attnkit bench --quick",
                           "mha_prefill_f32_n2048_e4096", "mha_decode_f32_m{4096,32768}_e4096_paged",
                           "mha_prefill_f32_n256_e1024", "tokens/s", "attn share", "tokens_per_second",
                           "attention_share", "fraction_of_bandwidth", "fraction_of_read_bandwidth", "read_gbytes_per_s", "of read", "1 - share", "fma_avx512_gflops",
                           "amx_bf16_gflops", "of AMX", "fraction_of_amx_peak", "blas_core_generic",
                           "OPENBLAS_CORETYPE=SkylakeX", "Haswell", "target"}) {
    EXPECT_NE(r.out.find(part), std::string::npos) << part;
  }
  EXPECT_NE(cli({"--help"}).out.find("bench"), std::string::npos) << "listed among the commands";
}

TEST(BenchCommand, BadUsageExits2) {
  const std::vector<std::vector<std::string>> bad = {
      {"bench", "--bogus"},          {"bench", "--repeat", "0"},     {"bench", "--repeat", "x"},
      {"bench", "--threads", "0"},   {"bench", "--sizes", "16,-1"},  {"bench", "--dims"},
      {"bench", "--kernel", "gpu"},  {"bench", "extra"},             {"bench", "--filter", "no_such_case"},
      {"bench", "--json", "--json"},
  };
  for (const auto& args : bad) {
    const Result r = cli(args);
    EXPECT_EQ(r.code, kUsage) << args[1] << ": " << r.err;
    EXPECT_NE(r.err.find("attnkit bench"), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << "nothing is measured before the flags are checked: " << r.out;
  }
}

// The batched decoding lines: every cache dtype on each thread count, GB/s the cache's bytes over the
// step, and each dtype's speed-up over the bf16 cache's step of the same thread count.
TEST(BenchCommand, BatchDecodeLinesCarryTheDocumentedKeys) {
  const Result r = cli({"bench", "--sizes", "24", "--dims", "32", "--threads", "1,2", "--repeat", "1", "--copy-mib", "4",
                        "--filter", "decode_batch", "--json"});
  ASSERT_EQ(r.code, kOk) << r.err;
  const std::vector<JsonObject> lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 15u) << r.out;  // ceilings, then 7 cache dtypes × 2 thread counts
  const JsonObject& ceilings = lines.front();
  std::map<double, double> bf16_seconds;  // by threads
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const JsonObject& o = lines[i];
    SCOPED_TRACE(text_of(o, "name"));
    for (const char* key : {"kind", "direction", "name", "batch", "heads", "kv_heads", "d", "dtype", "threads", "block_size",
                            "lengths", "lengths_seed", "tokens", "seconds", "runs", "flops", "gflops", "fraction_of_peak",
                            "kv_bytes", "gbytes_per_s", "fraction_of_bandwidth", "fraction_of_read_bandwidth",
                            "speedup_vs_bf16", "kernel", "target"}) {
      EXPECT_TRUE(o.count(key)) << key;
    }
    EXPECT_EQ(text_of(o, "kind"), "decode_batch");
    EXPECT_EQ(number_of(o, "batch"), 32.0);
    ASSERT_EQ(o.at("lengths").size(), 32u);
    double tokens = 0;
    for (double l : numbers_of(o, "lengths")) tokens += l;
    EXPECT_EQ(number_of(o, "tokens"), tokens);
    expect_target(o);
    expect_fraction_of_best(o, ceilings);
    expect_fractions_of_bandwidths(o, ceilings);
    constexpr double kSixDigits = 1e-4;  // JSON numbers carry 6 significant digits
    const double seconds = number_of(o, "seconds");
    EXPECT_NEAR(number_of(o, "gbytes_per_s") * seconds * 1e9 / number_of(o, "kv_bytes"), 1.0, kSixDigits);
    if (text_of(o, "dtype") == "bf16") bf16_seconds[number_of(o, "threads")] = seconds;
    ASSERT_TRUE(bf16_seconds.count(number_of(o, "threads"))) << "the bf16 case runs first";
    EXPECT_NEAR(number_of(o, "speedup_vs_bf16") * seconds / bf16_seconds[number_of(o, "threads")], 1.0, kSixDigits);
  }
  EXPECT_EQ(text_of(lines[1], "dtype"), "bf16");
  const Result text = cli({"bench", "--sizes", "24", "--dims", "32", "--threads", "1", "--repeat", "1", "--copy-mib", "4",
                           "--filter", "decode_batch_int4"});
  ASSERT_EQ(text.code, kOk) << text.err;
  EXPECT_NE(text.out.find("batched decoding (attend over a paged cache, blocks of 16 tokens): 32 sequences"), std::string::npos)
      << text.out;
  EXPECT_EQ(row_cells(text.out, "decode_batch_int4_b32_upto24_d32").size(), 9u) << text.out;
  EXPECT_EQ(row_cells(text.out, "decode_batch_int4_b32_upto24_d32").at(6), "-") << "no bf16 row to compare with";
}

}  // namespace
