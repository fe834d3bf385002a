// Argument checking at the API edge. Everything a kernel may assume is established here, once, and
// every failure is an attnkit::Error that names the argument, the shapes and what was expected.
#pragma once

#include <cstdint>
#include <optional>

#include "attnkit/kv_cache.hpp"
#include "core/problem.hpp"

namespace attnkit::detail {

Problem validate_forward(ConstTensorView q, ConstTensorView k, ConstTensorView v, TensorView out,
                         const AttentionOptions& options, const ForwardExtras& extras, ForwardOutputs& outputs);

// Attention over a KV cache: q [B, Hq, n, d_k] against the cache's block pools [blocks, Hkv,
// block_size, d]; `cached` says where entry b's keys are, m is their largest count. The options
// resolve as AttentionOptions with bottom-right causal alignment.
Problem validate_cached_forward(ConstTensorView q, ConstTensorView k_pool, ConstTensorView v_pool, const CachedKeys& cached,
                                std::int64_t m, TensorView out, const CachedAttentionOptions& options,
                                ForwardOutputs& outputs);

Problem validate_backward(ConstTensorView q, ConstTensorView k, ConstTensorView v, const BackwardIO& io,
                          const AttentionOptions& options);

}  // namespace attnkit::detail
