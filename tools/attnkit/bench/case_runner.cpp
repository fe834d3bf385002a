// One case: inputs made and touched first, then each implementation timed on them.
#include "bench/case_runner.hpp"

#include <cstdint>
#include <random>
#include <vector>

#include "attnkit/attention.hpp"
#include "attnkit/tensor.hpp"
#include "bench/attnkit_threads.hpp"
#include "bench/blas_attention.hpp"
#include "bench/naive_attention.hpp"

namespace attnkit::bench {

namespace {

constexpr std::uint32_t kInputSeed = 20240603;  // fixed, so every run times the same numbers
constexpr float kInputRange = 1.0f;             // inputs uniform in [-1, 1]: logits of order 1

Tensor random_f32(std::mt19937& rng, std::vector<std::int64_t> shape) {
  Tensor t(DType::f32, std::move(shape));
  std::uniform_real_distribution<float> uniform(-kInputRange, kInputRange);
  float* p = t.data<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = uniform(rng);
  return t;
}

}  // namespace

// f32 inputs of one case, written (so every page is touched) before anything is timed. Outputs are
// Tensors, whose storage is zero-filled on allocation.
struct CaseRunner::Inputs {
  explicit Inputs(const AttentionShape& s) : out_shape{s.batch, s.heads, s.n, s.d_v} {
    std::mt19937 rng(kInputSeed);
    q = random_f32(rng, {s.batch, s.heads, s.n, s.d_k});
    k = random_f32(rng, {s.batch, s.kv_heads, s.m, s.d_k});
    v = random_f32(rng, {s.batch, s.kv_heads, s.m, s.d_v});
  }
  std::vector<std::int64_t> out_shape;
  Tensor q, k, v;
};

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

CaseResult CaseRunner::run(const BenchCase& c) {
  Inputs in(c.shape);
  CaseResult r{c, kernel_name(resolve_kernel(options_.kernel)), {}, {}, {}, {}};
  const Baselines& b = baselines(c, in);
  r.naive = b.naive;
  r.openblas = b.openblas;
  r.openblas_note = b.openblas_note;

  // attnkit on the case's dtype: bf16 cases read the same numbers rounded to bf16.
  const Tensor q = Tensor::converted(in.q.view(), c.dtype);
  const Tensor k = Tensor::converted(in.k.view(), c.dtype);
  const Tensor v = Tensor::converted(in.v.view(), c.dtype);
  Tensor out(c.dtype, in.out_shape);
  AttentionOptions options;
  options.causal = c.shape.causal ? Causal::top_left : Causal::none;
  options.kernel = options_.kernel;
  const AttnkitThreads threads(c.threads);
  r.timing = time_calls(
      options_.timing, [&] { forward(q.view(), k.view(), v.view(), out.view(), options); }, before_each_call(c));
  return r;
}

}  // namespace attnkit::bench
