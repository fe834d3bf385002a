#include "bench/varlen_runner.hpp"

#include <cstdint>
#include <random>
#include <vector>

#include "attnkit/attention.hpp"
#include "attnkit/varlen.hpp"
#include "bench/attnkit_threads.hpp"
#include "bench/kernel_target.hpp"
#include "bench/random_inputs.hpp"

namespace attnkit::bench {
namespace {

// A [B, S, H, d] tensor (the packed layout's row order) seen as the [B, H, S, d] forward takes.
TensorView sequence_major(Tensor& t) {
  const std::int64_t B = t.shape()[0], S = t.shape()[1], H = t.shape()[2], d = t.shape()[3];
  return TensorView(t.raw(), t.dtype(), {B, H, S, d}, {S * H * d, d, H * d, 1});
}

}  // namespace

VarlenResult run_varlen_case(const VarlenCase& c, const TimingPlan& plan, Kernel kernel) {
  VarlenResult r;
  r.varlen_case = c;
  r.kernel = kernel_name(resolve_kernel(kernel));
  r.target = target_of(resolve_kernel(kernel), DType::f32, DType::f32, DType::f32, Pass::forward);
  const std::int64_t B = static_cast<std::int64_t>(c.lengths.size()), H = c.heads, d = c.d;
  AttentionOptions options;
  options.causal = c.causal ? Causal::top_left : Causal::none;
  options.kernel = kernel;
  std::mt19937 rng(kInputSeed);
  const AttnkitThreads threads(c.threads);

  {  // packed: every sequence's rows one after another, [total, H, d]
    std::vector<std::int64_t> offsets = {0};
    for (std::int64_t l : c.lengths) offsets.push_back(offsets.back() + l);
    const std::int64_t total = offsets.back();
    const Tensor q = random_f32(rng, {total, H, d}), k = random_f32(rng, {total, H, d}), v = random_f32(rng, {total, H, d});
    Tensor out(DType::f32, {total, H, d});
    const ConstTensorView cu = ConstTensorView::contiguous(offsets.data(), DType::i64, {B + 1});
    r.packed = time_calls(plan, [&] { varlen_forward(q.view(), k.view(), v.view(), {cu, cu}, out.view(), options); });
  }
  {  // equal lengths, the same memory layout
    const std::int64_t L = c.equal_length();
    Tensor q = random_f32(rng, {B, L, H, d}), k = random_f32(rng, {B, L, H, d}), v = random_f32(rng, {B, L, H, d});
    Tensor out(DType::f32, {B, L, H, d});
    r.equal = time_calls(plan, [&] {
      forward(sequence_major(q), sequence_major(k), sequence_major(v), sequence_major(out), options);
    });
  }
  {  // padded to the longest, the padding masked by key_lengths, then by a mask (its queries still computed)
    const std::int64_t L = c.longest();
    Tensor q = random_f32(rng, {B, L, H, d}), k = random_f32(rng, {B, L, H, d}), v = random_f32(rng, {B, L, H, d});
    Tensor out(DType::f32, {B, L, H, d});
    AttentionOptions with_lengths = options;
    with_lengths.key_lengths = c.lengths;
    r.padded = time_calls(plan, [&] {
      forward(sequence_major(q), sequence_major(k), sequence_major(v), sequence_major(out), with_lengths);
    });
    Tensor keep(DType::boolean, {B, 1, 1, L});
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t j = 0; j < L; ++j) keep.data<bool>()[b * L + j] = j < c.lengths[static_cast<std::size_t>(b)];
    AttentionOptions with_mask = options;
    with_mask.mask = keep.view();
    r.masked = time_calls(plan, [&] {
      forward(sequence_major(q), sequence_major(k), sequence_major(v), sequence_major(out), with_mask);
    });
  }
  return r;
}

}  // namespace attnkit::bench
