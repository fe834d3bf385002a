// The benchmark's cases: the forward shapes (prefill, decode), the backward on the prefill shapes,
// the --quick subset, and the flags that narrow them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attnkit/dtype.hpp"
#include "attnkit/kv_cache.hpp"
#include "bench/attention_shape.hpp"

namespace attnkit::bench {

enum class CaseKind {
  forward,   // prefill: n = m queries and keys, 8 heads, the forward kernel's compute-bound case
  backward,  // attnkit::backward on the forward cases' shapes (out and lse from one forward call)
  decode,    // one new query over a long KV cache, GQA: bound by reading K and V
};

struct BenchCase {
  std::string name;  // e.g. "fwd_f32_n1024_d64_causal", "bwd_f32_n1024_d64", "decode_bf16_m4096_d128"
  CaseKind kind = CaseKind::forward;
  DType dtype = DType::f32;
  AttentionShape shape;  // causal is top-left (n == m here)
  int threads = 1;
  // Decode cases of int8 and int4 caches: how the cache quantises its keys ("…_per_channel_…" cases).
  KeyQuantization key_quantization = KeyQuantization::per_token;

  // Floating-point operations of one call: 2·n·m·d_k for the scores and 2·n·m·d_v for P·V per query
  // head (4·n·m·d when d_k = d_v), halved for causal; a backward counts 2.5× its forward
  // (docs/performance.md).
  double flops() const;
  // A backward case's forward: the same shape, dtype and threads (its name starts with "fwd_").
  BenchCase forward_counterpart() const;
  // Bytes of K and V one call must read at least once (the decode cases' lower bound on traffic).
  double kv_bytes() const;
  // The f32 baselines' key: f32 and bf16 cases of one shape and thread count share their timings.
  std::string baseline_key() const;
};

struct CaseSelection {
  bool quick = false;                 // the ~30-second subset
  std::vector<std::int64_t> sizes;    // override: n = m for forward cases, m for decode cases
  std::vector<std::int64_t> dims;     // override: head dimensions d
  std::vector<int> threads;           // thread counts, e.g. {1, 2}
  std::string filter;                 // keep cases whose name contains this; empty keeps all
};

// --filter: a name is selected when it contains `filter`; an empty filter selects everything.
bool matches_filter(const std::string& name, const std::string& filter);

// Cases in run order: forward cases grouped by shape (so f32 and bf16 share baselines), then backward
// cases in the same order (so each finds its forward already timed), then decode. --quick keeps one
// backward shape: the smallest size and first dimension, f32, not causal, on each thread count.
std::vector<BenchCase> select_cases(const CaseSelection& selection);

}  // namespace attnkit::bench
