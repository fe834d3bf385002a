// One module case: the layer and its inputs made first, the cache set up as the case needs it, then
// the module and attention alone timed on it.
#include "bench/module_runner.hpp"

#include <algorithm>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "attnkit/attention.hpp"
#include "attnkit/kv_cache.hpp"
#include "attnkit/tensor.hpp"
#include "bench/attnkit_threads.hpp"
#include "bench/kernel_target.hpp"
#include "bench/random_inputs.hpp"

namespace attnkit::bench {

namespace {

constexpr std::uint64_t kWeightSeed = 5;        // fixed: every run times the same layer
constexpr std::int64_t kFillChunkTokens = 512;  // tokens per KVCache::append when pre-filling a decode cache

MultiHeadAttentionConfig config_of(const ModuleLayer& layer) {
  MultiHeadAttentionConfig c;
  c.embed_dim = layer.embed_dim;
  c.num_heads = layer.num_heads;
  c.num_kv_heads = layer.num_kv_heads;
  c.head_dim = layer.head_dim;
  c.bias = false;
  c.rope = RopeConfig{};
  c.weight_dtype = DType::f32;
  return c;
}

// One sequence of up to `max_tokens` tokens in the case's layout.
KVCacheConfig cache_config(const ModuleCase& c, std::int64_t max_tokens) {
  KVCacheConfig k;
  k.num_kv_heads = c.layer.num_kv_heads;
  k.head_dim = c.layer.head_dim;
  k.max_sequences = 1;
  k.max_sequence_length = max_tokens;
  k.layout = c.layout;
  k.block_size = kPagedBlockSize;
  k.dtype = c.cache_dtype;
  return k;
}

// [1, S, heads·d] token-major storage seen as [1, heads, S, d]: how the module lays out its queries
// and attention output, so that attend alone reads and writes with the module's strides.
ConstTensorView heads_view(const Tensor& t, std::int64_t heads, std::int64_t d) {
  const std::int64_t s = t.shape()[1];
  return ConstTensorView(t.raw(), DType::f32, {1, heads, s, d}, {s * heads * d, d, heads * d, 1});
}
TensorView heads_view(Tensor& t, std::int64_t heads, std::int64_t d) {
  const std::int64_t s = t.shape()[1];
  return TensorView(t.raw(), DType::f32, {1, heads, s, d}, {s * heads * d, d, heads * d, 1});
}

// Fills the sequence to `tokens` with random keys and values through KVCache::append, in chunks: far
// faster than prefilling through the module (minutes at m = 32768), and attention's time does not
// depend on the values, so one random chunk is appended over and over.
void fill(KVCache& cache, KVCache::SequenceId sequence, const ModuleLayer& layer, std::int64_t tokens,
          std::mt19937& rng) {
  const std::int64_t heads = layer.num_kv_heads, d = layer.head_dim;
  const std::int64_t chunk = std::min(tokens, kFillChunkTokens);
  const Tensor keys = random_f32(rng, {heads, chunk, d});
  const Tensor values = random_f32(rng, {heads, chunk, d});
  for (std::int64_t done = 0; done < tokens; done += chunk) {
    const std::int64_t count = std::min(chunk, tokens - done);
    cache.append(sequence, ConstTensorView(keys.raw(), DType::f32, {heads, count, d}, {chunk * d, d, 1}),
                 ConstTensorView(values.raw(), DType::f32, {heads, count, d}, {chunk * d, d, 1}));
  }
}

}  // namespace

const MultiHeadAttention& ModuleRunner::module_for(const ModuleLayer& layer) {
  const ModuleLayer& held = module_layer_;
  const bool same = module_ && held.embed_dim == layer.embed_dim && held.num_heads == layer.num_heads &&
                    held.num_kv_heads == layer.num_kv_heads && held.head_dim == layer.head_dim;
  if (!same) {
    module_.reset();  // free the old weights before making the new ones
    module_ = std::make_unique<MultiHeadAttention>(config_of(layer), kWeightSeed);
    module_layer_ = layer;
  }
  return *module_;
}

std::function<void()> ModuleRunner::evict() {
  if (!evictor_) evictor_ = std::make_unique<CacheEvictor>();
  return [this] { evictor_->evict(); };
}

// Prefill: each timed call sends the n tokens into a fresh, empty sequence (the previous one freed
// and a new one added, untimed). Attention alone then runs n queries over the n tokens the last call
// cached. Compute-bound, so the caches are not flushed, as for the forward cases.
void ModuleRunner::time_prefill(const ModuleCase& c, ModuleResult& r) {
  const MultiHeadAttention& layer = module_for(c.layer);
  const ModuleLayer& l = c.layer;
  std::mt19937 rng(kInputSeed);
  const Tensor x = random_f32(rng, {1, c.tokens, l.embed_dim});
  const Tensor q = random_f32(rng, {1, c.tokens, l.q_width()});
  Tensor out(DType::f32, {1, c.tokens, l.q_width()});
  KVCache cache(cache_config(c, c.tokens));
  KVCache::SequenceId id = cache.add_sequence();
  const std::span<const KVCache::SequenceId> sequence(&id, 1);  // follows `id` as it is renewed

  const AttnkitThreads threads(c.threads);
  CachedForwardOptions forward_options;
  forward_options.kernel = options_.kernel;
  r.timing = time_calls(
      options_.timing, [&] { layer.forward_cached(x.view(), cache, sequence, forward_options); },
      [&] {
        cache.free_sequence(id);
        id = cache.add_sequence();
      });

  CachedAttentionOptions attention_options;
  attention_options.kernel = options_.kernel;
  r.attention = time_calls(options_.timing, [&] {
    attend(cache, sequence, heads_view(q, l.num_heads, l.head_dim), heads_view(out, l.num_heads, l.head_dim),
           attention_options);
  });
}

// Decode: the sequence is pre-filled to m tokens, then each call is one step of one token, with the
// caches flushed before it (in generation the other layers' traffic comes in between). Attention
// alone is timed first, 1 query over exactly the m cached tokens; then the module, whose steps grow
// the sequence by one token each, so the cache holds m plus room for those steps: a growth of
// repeats + 1 tokens, 0.15% of m = 4096 at the default 5 repeats and negligible at 32768.
void ModuleRunner::time_decode(const ModuleCase& c, ModuleResult& r) {
  const MultiHeadAttention& layer = module_for(c.layer);
  const ModuleLayer& l = c.layer;
  const std::int64_t steps = std::max(options_.timing.repeats, 1) + 1;  // time_calls' warm-up and repeats
  std::mt19937 rng(kInputSeed);
  const Tensor x = random_f32(rng, {1, 1, l.embed_dim});
  const Tensor q = random_f32(rng, {1, 1, l.q_width()});
  Tensor out(DType::f32, {1, 1, l.q_width()});
  KVCache cache(cache_config(c, c.context + steps));
  const KVCache::SequenceId id = cache.add_sequence();
  fill(cache, id, l, c.context, rng);
  const std::span<const KVCache::SequenceId> sequence(&id, 1);
  const std::function<void()> flush = evict();

  const AttnkitThreads threads(c.threads);
  CachedAttentionOptions attention_options;
  attention_options.kernel = options_.kernel;
  r.attention = time_calls(
      options_.timing,
      [&] {
        attend(cache, sequence, heads_view(q, l.num_heads, l.head_dim), heads_view(out, l.num_heads, l.head_dim),
               attention_options);
      },
      flush);

  CachedForwardOptions forward_options;
  forward_options.kernel = options_.kernel;
  r.timing = time_calls(
      options_.timing, [&] { layer.forward_cached(x.view(), cache, sequence, forward_options); }, flush);
}

ModuleResult ModuleRunner::run(const ModuleCase& c) {
  ModuleResult r;
  r.module_case = c;
  const Kernel resolved = resolve_kernel(options_.kernel, DType::f32);
  r.kernel = kernel_name(resolved);
  // A forward of f32 queries (the layer's projections) over the cache's K and V, whatever it holds.
  r.target = target_of(resolved, DType::f32, c.cache_dtype, c.cache_dtype, Pass::forward);
  if (c.kind == ModuleKind::prefill) {
    time_prefill(c, r);
  } else {
    time_decode(c, r);
  }
  return r;
}

}  // namespace attnkit::bench
