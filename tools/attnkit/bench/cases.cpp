// The forward, decode and backward case lists and their quick subset.
#include "bench/cases.hpp"

#include "attnkit/quantized.hpp"

#include <algorithm>
#include <span>

namespace attnkit::bench {

namespace {

// Forward (prefill) cases: batch 1, 8 heads, n = m.
constexpr std::int64_t kForwardHeads = 8;
const std::vector<std::int64_t> kForwardSizes = {512, 1024, 2048, 8192};
const std::vector<std::int64_t> kForwardDims = {64, 128};
// --quick: small n, so that the quick run stays short on every kernel, the float64 reference included:
// it is O(n·m·d) plain loops, and n = 512 at 8 heads takes ~0.1 s per call there.
const std::vector<std::int64_t> kQuickForwardSizes = {256, 512};
const std::vector<std::int64_t> kQuickForwardDims = {64};

// Decode cases: one query per head, 32 query heads over 8 KV heads (GQA), d = 128.
constexpr std::int64_t kDecodeQueries = 1;
constexpr std::int64_t kDecodeHeads = 32;
constexpr std::int64_t kDecodeKvHeads = 8;
const std::vector<std::int64_t> kDecodeSizes = {4096, 32768};
const std::vector<std::int64_t> kQuickDecodeSizes = {4096};
const std::vector<std::int64_t> kDecodeDims = {128};

// Forward and backward in f32 and bf16; the forward in f16 too (the last), outside --quick: on the
// f16 tiles where the CPU has AMX-FP16, elsewhere widened on the vectors, where it should keep the
// f32 rate.
constexpr DType kPrefillDTypes[] = {DType::f32, DType::bf16, DType::f16};
// Decoding reads the cache where it is stored, in each of the dtypes a cache may hold (the decode
// rate is a fraction of the memory bandwidth for each of them).
// int8, int4, fp8_e4m3 and fp8_e5m2: a KV cache of that storage (attnkit/quantized.hpp), read by
// attnkit::attend (for head dimensions of whole blocks of 32 only).
// Last, int8 and int4 caches with keys quantised per channel (groups of 32 tokens).
struct DecodeCache {
  DType dtype;
  KeyQuantization keys = KeyQuantization::per_token;
};
constexpr DecodeCache kDecodeCaches[] = {{DType::f32},  {DType::bf16},     {DType::f16},
                                         {DType::int8}, {DType::int4},     {DType::fp8_e4m3},
                                         {DType::fp8_e5m2},
                                         {DType::int8, KeyQuantization::per_channel},
                                         {DType::int4, KeyQuantization::per_channel}};
constexpr double kCausalFlopFraction = 0.5;  // top-left causal with n = m computes about half the scores
// The backward recomputes the scores (Q·Kᵀ) and forms dV = Pᵀ·dO, dP = dO·Vᵀ, dQ = dS·K and dK = dSᵀ·Q:
// five n·m·d products against the forward's two, the 2.5× of docs/performance.md.
constexpr double kBackwardFlopFactor = 2.5;

// "fwd_f32_n1024_d64_causal" or "bwd_f32_n1024_d64_causal".
std::string prefill_name(CaseKind kind, DType dtype, const AttentionShape& s) {
  return std::string(kind == CaseKind::backward ? "bwd_" : "fwd_") + std::string(dtype_name(dtype)) + "_n" +
         std::to_string(s.n) + "_d" + std::to_string(s.d_k) + (s.causal ? "_causal" : "");
}

std::string decode_name(DType dtype, const AttentionShape& s, KeyQuantization keys) {
  return "decode_" + std::string(dtype_name(dtype)) + (keys == KeyQuantization::per_channel ? "_per_channel" : "") + "_m" +
         std::to_string(s.m) + "_d" + std::to_string(s.d_k);
}

const std::vector<std::int64_t>& pick(const std::vector<std::int64_t>& override_values,
                                      const std::vector<std::int64_t>& quick_values,
                                      const std::vector<std::int64_t>& full_values, bool quick) {
  if (!override_values.empty()) return override_values;
  return quick ? quick_values : full_values;
}

void add_if_selected(std::vector<BenchCase>& cases, const CaseSelection& sel, BenchCase c) {
  if (matches_filter(c.name, sel.filter)) cases.push_back(std::move(c));
}

AttentionShape prefill_shape(std::int64_t n, std::int64_t d, bool causal) {
  return {1, kForwardHeads, kForwardHeads, n, n, d, d, causal};
}

// Forward or backward cases on the forward shapes.
void add_prefill_cases(std::vector<BenchCase>& cases, const CaseSelection& sel, CaseKind kind) {
  const bool with_f16 = kind == CaseKind::forward && !sel.quick;
  const std::span<const DType> dtypes = std::span(kPrefillDTypes).first(with_f16 ? 3 : 2);
  for (std::int64_t n : pick(sel.sizes, kQuickForwardSizes, kForwardSizes, sel.quick)) {
    for (std::int64_t d : pick(sel.dims, kQuickForwardDims, kForwardDims, sel.quick)) {
      for (bool causal : {false, true}) {
        for (int threads : sel.threads) {
          for (DType dtype : dtypes) {
            const AttentionShape shape = prefill_shape(n, d, causal);
            add_if_selected(cases, sel, {prefill_name(kind, dtype, shape), kind, dtype, shape, threads});
          }
        }
      }
    }
  }
}

// --quick: one small backward shape, so that the subset stays within its ~30 seconds even when the
// backward runs on the float64 reference.
void add_quick_backward_cases(std::vector<BenchCase>& cases, const CaseSelection& sel) {
  const std::vector<std::int64_t>& sizes = pick(sel.sizes, kQuickForwardSizes, kForwardSizes, true);
  const std::vector<std::int64_t>& dims = pick(sel.dims, kQuickForwardDims, kForwardDims, true);
  const AttentionShape shape = prefill_shape(*std::min_element(sizes.begin(), sizes.end()), dims.front(), false);
  for (int threads : sel.threads) {
    add_if_selected(cases, sel,
                    {prefill_name(CaseKind::backward, DType::f32, shape), CaseKind::backward, DType::f32, shape, threads});
  }
}

void add_decode_cases(std::vector<BenchCase>& cases, const CaseSelection& sel) {
  for (std::int64_t m : pick(sel.sizes, kQuickDecodeSizes, kDecodeSizes, sel.quick)) {
    for (std::int64_t d : pick(sel.dims, kDecodeDims, kDecodeDims, sel.quick)) {
      for (int threads : sel.threads) {
        for (const auto [dtype, keys] : kDecodeCaches) {
          if (is_quantized(dtype) && d % kQuantBlock != 0) continue;  // quantized rows are whole blocks
          const AttentionShape shape{1, kDecodeHeads, kDecodeKvHeads, kDecodeQueries, m, d, d, false};
          add_if_selected(cases, sel, {decode_name(dtype, shape, keys), CaseKind::decode, dtype, shape, threads, keys});
        }
      }
    }
  }
}

}  // namespace

double BenchCase::flops() const {
  const AttentionShape& s = shape;
  const double pairs = static_cast<double>(s.n) * static_cast<double>(s.m);  // (query, key) pairs per head
  const double per_head = 2.0 * pairs * static_cast<double>(s.d_k + s.d_v);
  const double forward = per_head * static_cast<double>(s.batch * s.heads) * (s.causal ? kCausalFlopFraction : 1.0);
  return kind == CaseKind::backward ? kBackwardFlopFactor * forward : forward;
}

BenchCase BenchCase::forward_counterpart() const {
  return {prefill_name(CaseKind::forward, dtype, shape), CaseKind::forward, dtype, shape, threads};
}

double BenchCase::kv_bytes() const {
  const AttentionShape& s = shape;
  const double rows = static_cast<double>(s.batch * s.kv_heads * s.m);
  if (is_quantized(dtype)) return rows * static_cast<double>(quantized_row_bytes(dtype, s.d_k) + quantized_row_bytes(dtype, s.d_v));
  return rows * static_cast<double>(s.d_k + s.d_v) * static_cast<double>(dtype_size(dtype));
}

std::string BenchCase::baseline_key() const {
  const AttentionShape& s = shape;
  return std::to_string(s.batch) + "x" + std::to_string(s.heads) + "/" + std::to_string(s.kv_heads) + " n" +
         std::to_string(s.n) + " m" + std::to_string(s.m) + " d" + std::to_string(s.d_k) + "," +
         std::to_string(s.d_v) + (s.causal ? " causal" : "") + " t" + std::to_string(threads);
}

bool matches_filter(const std::string& name, const std::string& filter) {
  return filter.empty() || name.find(filter) != std::string::npos;
}

std::vector<BenchCase> select_cases(const CaseSelection& selection) {
  std::vector<BenchCase> cases;
  add_prefill_cases(cases, selection, CaseKind::forward);
  if (selection.quick) {
    add_quick_backward_cases(cases, selection);
  } else {
    add_prefill_cases(cases, selection, CaseKind::backward);
  }
  add_decode_cases(cases, selection);
  return cases;
}

}  // namespace attnkit::bench
