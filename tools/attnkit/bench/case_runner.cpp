// One case: inputs made and touched first, then each implementation timed on them.
#include "bench/case_runner.hpp"

#include <cstdint>
#include <random>
#include <vector>

#include "attnkit/attention.hpp"
#include "attnkit/kv_cache.hpp"
#include "attnkit/quantized.hpp"
#include "attnkit/tensor.hpp"
#include "bench/attnkit_threads.hpp"
#include "bench/blas_attention.hpp"
#include "bench/kernel_target.hpp"
#include "bench/naive_attention.hpp"
#include "bench/random_inputs.hpp"

namespace attnkit::bench {

// f32 inputs of one case, written (so every page is touched) before anything is timed. Outputs are
// Tensors, whose storage is zero-filled on allocation. d_out, the backward's upstream gradient, is
// drawn after q, k and v, so a forward and a backward case of one shape time the same q, k and v.
struct CaseRunner::Inputs {
  Inputs(const AttentionShape& s, bool with_d_out)
      : out_shape{s.batch, s.heads, s.n, s.d_v}, lse_shape{s.batch, s.heads, s.n} {
    std::mt19937 rng(kInputSeed);
    q = random_f32(rng, {s.batch, s.heads, s.n, s.d_k});
    k = random_f32(rng, {s.batch, s.kv_heads, s.m, s.d_k});
    v = random_f32(rng, {s.batch, s.kv_heads, s.m, s.d_v});
    if (with_d_out) d_out = random_f32(rng, out_shape);
  }
  std::vector<std::int64_t> out_shape, lse_shape;
  Tensor q, k, v, d_out;
};

namespace {

AttentionOptions options_for(const BenchCase& c, Kernel kernel) {
  AttentionOptions options;
  options.causal = c.shape.causal ? Causal::top_left : Causal::none;
  options.kernel = kernel;
  return options;
}

// The key of forward_timings_: one per forward case name and thread count.
std::string timing_key(const BenchCase& c) { return c.name + " t" + std::to_string(c.threads); }

// The target a case's calls run on: quantized decoding reads quantized K and V under the f32
// queries (time_quantized_decode); every other case has q, k and v in its dtype.
std::optional<std::string> target_of_case(const BenchCase& c, Kernel resolved) {
  return target_of(resolved, is_quantized(c.dtype) ? DType::f32 : c.dtype, c.dtype, c.dtype,
                   c.kind == CaseKind::backward ? Pass::backward : Pass::forward);
}

}  // namespace

std::function<void()> CaseRunner::before_each_call(const BenchCase& c) {
  if (c.kind != CaseKind::decode) return {};
  if (!evictor_) evictor_ = std::make_unique<CacheEvictor>();
  return [this] { evictor_->evict(); };
}

const CaseRunner::Baselines& CaseRunner::baselines(const BenchCase& c, const Inputs& in) {
  const std::string key = c.baseline_key();
  if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  Baselines b;
  const float* q = in.q.data<float>();
  const float* k = in.k.data<float>();
  const float* v = in.v.data<float>();
  Tensor out(DType::f32, in.out_shape);
  if (options_.naive) {
    NaiveAttention naive(c.shape, c.threads);
    b.naive = time_calls(options_.timing, [&] { naive.run(q, k, v, out.data<float>()); }, before_each_call(c));
  }
  if (!options_.openblas) {
    b.openblas_note = "--no-openblas";
  } else if (const BlasInfo info = BlasAttention::info(); !info.available) {
    b.openblas_note = info.description;
  } else {
    BlasAttention blas(c.shape, c.threads);
    b.openblas = time_calls(options_.timing, [&] { blas.run(q, k, v, out.data<float>()); }, before_each_call(c));
  }
  return cache_.emplace(key, std::move(b)).first->second;
}

// attnkit::attend over a contiguous KV cache holding K and V in a quantized dtype (int8, int4, fp8): the
// decode cases of those dtypes, as an engine runs them. One sequence per batch entry, its last key
// the query's position, so every key is seen as in the plain decode cases.
Timing CaseRunner::time_quantized_decode(const BenchCase& c, const Inputs& in) {
  const AttentionShape& s = c.shape;
  KVCacheConfig config;
  config.num_kv_heads = s.kv_heads;
  config.head_dim = s.d_k;
  config.value_dim = s.d_v;
  config.max_sequences = s.batch;
  config.max_sequence_length = s.m;
  config.dtype = c.dtype;
  config.key_quantization = c.key_quantization;
  KVCache cache(config);
  std::vector<KVCache::SequenceId> ids;
  for (std::int64_t b = 0; b < s.batch; ++b) {
    ids.push_back(cache.add_sequence());
    const ConstTensorView k = in.k.view(), v = in.v.view();
    cache.append(ids.back(), ConstTensorView(k.at<float>({b, 0, 0, 0}), DType::f32, {s.kv_heads, s.m, s.d_k}, {k.stride(1), k.stride(2), k.stride(3)}),
                 ConstTensorView(v.at<float>({b, 0, 0, 0}), DType::f32, {s.kv_heads, s.m, s.d_v}, {v.stride(1), v.stride(2), v.stride(3)}));
  }
  Tensor out(DType::f32, in.out_shape);
  CachedAttentionOptions options;
  options.kernel = options_.kernel;
  const AttnkitThreads threads(c.threads);
  return time_calls(options_.timing, [&] { attend(cache, ids, in.q.view(), out.view(), options); }, before_each_call(c));
}

// attnkit::forward on the case's dtype: bf16 cases read the same numbers rounded to bf16.
Timing CaseRunner::time_forward(const BenchCase& c, const Inputs& in) {
  if (is_quantized(c.dtype)) return time_quantized_decode(c, in);
  const Tensor q = Tensor::converted(in.q.view(), c.dtype);
  const Tensor k = Tensor::converted(in.k.view(), c.dtype);
  const Tensor v = Tensor::converted(in.v.view(), c.dtype);
  Tensor out(c.dtype, in.out_shape);
  const AttentionOptions options = options_for(c, options_.kernel);
  const AttnkitThreads threads(c.threads);
  return time_calls(
      options_.timing, [&] { forward(q.view(), k.view(), v.view(), out.view(), options); }, before_each_call(c));
}

// attnkit::backward alone: one untimed forward first gives the out and lse it needs.
Timing CaseRunner::time_backward(const BenchCase& c, const Inputs& in) {
  const Tensor q = Tensor::converted(in.q.view(), c.dtype);
  const Tensor k = Tensor::converted(in.k.view(), c.dtype);
  const Tensor v = Tensor::converted(in.v.view(), c.dtype);
  const Tensor d_out = Tensor::converted(in.d_out.view(), c.dtype);
  Tensor out(c.dtype, in.out_shape), lse(DType::f32, in.lse_shape);
  Tensor dq(c.dtype, q.shape()), dk(c.dtype, k.shape()), dv(c.dtype, v.shape());
  const AttentionOptions options = options_for(c, options_.kernel);
  const AttnkitThreads threads(c.threads);
  forward(q.view(), k.view(), v.view(), out.view(), options, ForwardExtras{lse.view(), {}});
  return time_calls(options_.timing, [&] {
    backward(q.view(), k.view(), v.view(), out.view(), d_out.view(), lse.view(), dq.view(), dk.view(), dv.view(),
             options);
  });
}

const Timing& CaseRunner::forward_timing(const BenchCase& backward_case, const Inputs& in) {
  const BenchCase forward_case = backward_case.forward_counterpart();
  const std::string key = timing_key(forward_case);
  if (auto it = forward_timings_.find(key); it != forward_timings_.end()) return it->second;
  return forward_timings_.emplace(key, time_forward(forward_case, in)).first->second;  // filtered out: time it now
}

CaseResult CaseRunner::run(const BenchCase& c) {
  const Inputs in(c.shape, c.kind == CaseKind::backward);
  CaseResult r;
  r.bench_case = c;
  const Kernel resolved = resolve_kernel(options_.kernel, c.dtype);
  r.kernel = kernel_name(resolved);
  r.target = target_of_case(c, resolved);
  if (c.kind == CaseKind::backward) {
    r.openblas_note = "the baselines are forward-only";
    r.timing = time_backward(c, in);
    r.forward = forward_timing(c, in);
    return r;
  }
  const Baselines& b = baselines(c, in);
  r.naive = b.naive;
  r.openblas = b.openblas;
  r.openblas_note = b.openblas_note;
  r.timing = time_forward(c, in);
  if (c.kind == CaseKind::forward) forward_timings_.emplace(timing_key(c), r.timing);
  return r;
}

}  // namespace attnkit::bench
