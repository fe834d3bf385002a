// The module cases: one MultiHeadAttention layer as an inference engine runs it, through
// MultiHeadAttention::forward_cached and a KVCache. A prefill puts n new tokens into an empty
// sequence; a decode step puts 1 token after m cached ones. Both report tokens/s and the share of
// the time spent in attention (attnkit::attend alone on the same cache) against the projections.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attnkit/kv_cache.hpp"
#include "bench/cases.hpp"

namespace attnkit::bench {

enum class ModuleKind {
  prefill,  // n new tokens into an empty sequence: compute-bound, reported against the FMA peak
  decode,   // 1 new token after m cached ones: bound by reading the weights and K and V
};

constexpr std::int64_t kPagedBlockSize = 16;  // tokens per block of the paged layout (vLLM's default)

// The layer: f32 weights, no bias, RoPE (Llama-like), grouped-query attention.
struct ModuleLayer {
  std::int64_t embed_dim = 0;     // E
  std::int64_t num_heads = 0;     // H
  std::int64_t num_kv_heads = 0;  // Hkv
  std::int64_t head_dim = 0;      // d

  std::int64_t q_width() const { return num_heads * head_dim; }
  std::int64_t kv_width() const { return num_kv_heads * head_dim; }
  // Weights one token's pass reads: W_q, W_k, W_v [(H + 2·Hkv)·d, E] and W_o [E, H·d].
  std::int64_t weight_elements() const { return embed_dim * (q_width() + 2 * kv_width()) + q_width() * embed_dim; }
};

struct ModuleCase {
  std::string name;  // e.g. "mha_prefill_f32_n2048_e4096", "mha_decode_f32_m32768_e4096_paged"
  ModuleKind kind = ModuleKind::prefill;
  ModuleLayer layer;
  std::int64_t tokens = 0;   // new tokens per call: n for a prefill, 1 for a decode step
  std::int64_t context = 0;  // tokens already cached before the call: 0 for a prefill, m for decode
  KVCacheLayout layout = KVCacheLayout::contiguous;
  int threads = 1;
  DType cache_dtype = DType::f32;  // the KV cache's storage: f32, or int8 / int4 (attnkit/quantized.hpp)

  // Floating-point operations of one call (docs/performance.md's rules): the projections
  // 2·t·E·(H·d + 2·Hkv·d) + 2·t·(H·d)·E, plus attention_flops().
  double flops() const;
  // Prefill: causal attention of n queries over n keys, 4·n·n·d per query head, halved.
  // Decode: 1 query over m keys, 4·m·d per query head.
  double attention_flops() const;
  // Decode: the bytes one step must read at least once, the f32 weights and K and V of the m cached
  // tokens (m·Hkv·d·2 values, or their quantized rows' bytes). A prefill is compute-bound: 0.
  double bytes() const;
};

// "paged" or "contiguous": the suffix of decode case names and the JSON "layout".
const char* layout_name(KVCacheLayout layout);

// Module cases in run order (prefill, then decode by context and layout), each on every thread
// count of `selection`, filtered by name. selection.sizes overrides n (prefill) and m (decode);
// selection.dims does not apply: the head dimension belongs to the layer. --quick runs a smaller
// layer (E = 1024, 8 heads over 2 KV heads) at smaller n and m.
std::vector<ModuleCase> select_module_cases(const CaseSelection& selection);

}  // namespace attnkit::bench
