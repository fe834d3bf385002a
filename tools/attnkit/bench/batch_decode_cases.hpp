// The batched decoding cases: one decode step of many sequences of mixed lengths at once, as a
// server decodes, through attnkit::attend over a paged KV cache (blocks of 16 tokens) holding them
// all, one query token per sequence. Every cache dtype; the step is bound by reading the cache, so
// it is reported as GB/s of cache read over the machine's read bandwidth, and as a speed-up over the
// bf16 cache's step on the same sequences.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attnkit/dtype.hpp"
#include "bench/cases.hpp"

namespace attnkit::bench {

struct BatchDecodeCase {
  std::string name;                   // e.g. "decode_batch_bf16_b32_mixed_d128"
  std::string group;                  // the name without the dtype: the cases that share the sequences
  DType dtype = DType::f32;           // the cache's storage; the queries are f32 for quantized caches
  std::vector<std::int64_t> lengths;  // each sequence's tokens in the cache
  std::uint32_t seed = 0;             // the lengths' draw
  std::int64_t heads = 32;            // query heads
  std::int64_t kv_heads = 8;
  std::int64_t d = 128;
  std::int64_t block_size = 16;       // the paged cache's tokens per block
  int threads = 1;

  std::int64_t tokens() const;        // Σ lengths
  // Bytes of K and V the step must read at least once: every token's rows of every KV head.
  double kv_bytes() const;
  // 4·d per query head and key (scores and P·V), summed over the sequences.
  double flops() const;
};

// The cases in run order: per head dimension, the bf16 cache first on every thread count (the
// others' speed-ups are over it), then f32, f16, int8, int4, fp8_e4m3, fp8_e5m2, each on every thread count (so that
// one filled cache serves them all), filtered by name. The full run draws 32 lengths
// from 512 to 32768 ("mixed"); --quick from 64 to 1024 ("short"); --sizes L from L/64 to L (the
// largest L given; "uptoL"). d = 128, or each of --dims (quantized caches only for whole blocks of 32).
std::vector<BatchDecodeCase> select_batch_decode_cases(const CaseSelection& selection);

}  // namespace attnkit::bench
