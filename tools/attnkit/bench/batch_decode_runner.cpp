#include "bench/batch_decode_runner.hpp"

#include <algorithm>
#include <random>

#include "attnkit/attention.hpp"
#include "attnkit/quantized.hpp"
#include "attnkit/tensor.hpp"
#include "bench/attnkit_threads.hpp"
#include "bench/kernel_target.hpp"
#include "bench/random_inputs.hpp"

namespace attnkit::bench {
namespace {

// The queries' dtype: the cache's for float caches (bf16 queries over a bf16 cache, as engines
// run them), f32 over the quantized ones.
DType query_dtype(DType cache) { return is_quantized(cache) ? DType::f32 : cache; }

}  // namespace

void BatchDecodeRunner::fill(const BatchDecodeCase& c) {
  const std::string key = c.group + " " + std::string(dtype_name(c.dtype));
  if (filled_ == key) return;
  cache_.reset();  // the previous cache's memory first
  ids_.clear();
  KVCacheConfig config;
  config.num_kv_heads = c.kv_heads;
  config.head_dim = c.d;
  config.max_sequences = static_cast<std::int64_t>(c.lengths.size());
  config.max_sequence_length = 1;
  config.layout = KVCacheLayout::paged;
  config.block_size = c.block_size;
  config.num_blocks = 0;
  for (std::int64_t l : c.lengths) {
    config.max_sequence_length = std::max(config.max_sequence_length, l);
    config.num_blocks += (l + c.block_size - 1) / c.block_size;  // exactly the blocks the batch holds
  }
  config.dtype = c.dtype;
  cache_ = std::make_unique<KVCache>(config);
  std::mt19937 rng(kInputSeed);
  for (std::int64_t l : c.lengths) {
    ids_.push_back(cache_->add_sequence());
    const Tensor k = random_f32(rng, {c.kv_heads, l, c.d}), v = random_f32(rng, {c.kv_heads, l, c.d});
    cache_->append(ids_.back(), k.view(), v.view());
  }
  filled_ = key;
}

BatchDecodeResult BatchDecodeRunner::run(const BatchDecodeCase& c) {
  BatchDecodeResult r;
  r.batch_case = c;
  const DType q_dtype = query_dtype(c.dtype);
  const Kernel resolved = resolve_kernel(kernel_, q_dtype);
  r.kernel = kernel_name(resolved);
  r.target = target_of(resolved, q_dtype, c.dtype, c.dtype, Pass::forward);
  fill(c);
  std::mt19937 rng(kInputSeed + 1);
  const std::int64_t batch = static_cast<std::int64_t>(c.lengths.size());
  const Tensor q = Tensor::converted(random_f32(rng, {batch, c.heads, 1, c.d}).view(), q_dtype);
  Tensor out(q_dtype, {batch, c.heads, 1, c.d});
  CachedAttentionOptions options;
  options.kernel = kernel_;
  if (!evictor_) evictor_ = std::make_unique<CacheEvictor>();
  const AttnkitThreads threads(c.threads);
  r.step = time_calls(timing_, [&] { attend(*cache_, ids_, q.view(), out.view(), options); }, [this] { evictor_->evict(); });
  return r;
}

}  // namespace attnkit::bench
