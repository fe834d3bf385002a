// attend(): attention of new queries over a KV cache. Validates, builds the block table of the
// batch, then either runs the fast kernel on the cache in place or, for Kernel::reference, gathers
// each sequence and runs the float64 reference on it.
#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "api/run_within_memory.hpp"
#include "api/validate.hpp"
#include "attnkit/attention.hpp"
#include "attnkit/error.hpp"
#include "attnkit/kv_cache.hpp"
#include "cpu/forward.hpp"

namespace attnkit {
namespace {

[[noreturn]] void fail(ErrorCode code, const std::string& message) { throw Error(code, message); }

// Entry b of a view's first dimension, keeping the rank: [1, ...].
template <class View>
View entry(const View& t, std::int64_t b) {
  using Byte = std::conditional_t<std::is_same_v<View, TensorView>, std::byte, const std::byte>;
  auto* base = static_cast<Byte*>(t.data()) + b * t.stride(0) * static_cast<std::int64_t>(dtype_size(t.dtype()));
  std::int64_t sizes[kMaxViewRank], strides[kMaxViewRank];
  for (int d = 0; d < t.rank(); ++d) {
    sizes[d] = d == 0 ? 1 : t.size(d);
    strides[d] = t.stride(d);
  }
  return View(base, t.dtype(), sizes, strides, t.rank());
}

// dst = src element by element, for a contiguous src of dst's shape and dtype (any dst strides).
void copy_into(const Tensor& src, TensorView dst) {
  const std::size_t elem = dtype_size(dst.dtype());
  const ConstTensorView s = src.view().unsqueezed_to(4);
  const TensorView d = dst.unsqueezed_to(4);
  std::int64_t flat = 0;
  for (std::int64_t a = 0; a < d.size(0); ++a)
    for (std::int64_t b = 0; b < d.size(1); ++b)
      for (std::int64_t c = 0; c < d.size(2); ++c)
        for (std::int64_t e = 0; e < d.size(3); ++e, ++flat) {
          auto* to = static_cast<std::byte*>(d.data()) +
                     (a * d.stride(0) + b * d.stride(1) + c * d.stride(2) + e * d.stride(3)) * static_cast<std::int64_t>(elem);
          std::memcpy(to, static_cast<const std::byte*>(s.data()) + flat * static_cast<std::int64_t>(elem), elem);
        }
}

// The reference: each sequence gathered from the cache, everything in float64, rounded once at the end.
// Every sequence is computed (and rounded to the output dtype) before the first element of `out` or
// `lse` is written, so a failure on a later sequence (out of memory) leaves the outputs untouched.
void reference_attend(const KVCache& cache, std::span<const KVCache::SequenceId> sequences, ConstTensorView q,
                      TensorView out, const AttentionOptions& options, const std::optional<TensorView>& lse) {
  const std::int64_t heads = q.size(1), n = q.size(2), d_v = out.size(3);
  std::vector<Tensor> outs, lses;
  for (std::size_t b = 0; b < sequences.size(); ++b) {
    const std::int64_t i = static_cast<std::int64_t>(b);
    const Tensor q64 = Tensor::converted(entry(q, i), DType::f64);
    const Tensor k64 = Tensor::converted(cache.keys(sequences[b]).view().unsqueezed_to(4), DType::f64);
    const Tensor v64 = Tensor::converted(cache.values(sequences[b]).view().unsqueezed_to(4), DType::f64);
    Tensor out64(DType::f64, {1, heads, n, d_v}), lse_b(DType::f32, {1, heads, n});
    attnkit::forward(q64.view(), k64.view(), v64.view(), out64.view(), options, ForwardExtras{lse_b.view(), std::nullopt});
    outs.push_back(Tensor::converted(out64.view(), out.dtype()));
    lses.push_back(std::move(lse_b));
  }
  for (std::size_t b = 0; b < sequences.size(); ++b) {  // copies only: nothing here can fail
    copy_into(outs[b], entry(out, static_cast<std::int64_t>(b)));
    if (lse) copy_into(lses[b], entry(*lse, static_cast<std::int64_t>(b)));
  }
}

// attend() itself, before memory failures are reported as errors.
void attend_sequences(const KVCache& cache, std::span<const KVCache::SequenceId> sequences, ConstTensorView q,
                      TensorView out, const CachedAttentionOptions& options) {
  const std::int64_t batch = static_cast<std::int64_t>(sequences.size());
  if (q.rank() != 4 || q.size(0) != batch) {
    fail(ErrorCode::invalid_shape, "q: expected [B, Hq, n, d_k] with B = " + std::to_string(batch) +
                                       " (one entry per sequence), got " + q.shape_string());
  }
  const KVCache::Storage storage = cache.storage();
  std::vector<std::int64_t> lengths, table;
  for (std::int64_t b = 0; b < batch; ++b) {
    const KVCache::SequenceId id = sequences[static_cast<std::size_t>(b)];
    if (std::count(sequences.begin(), sequences.end(), id) > 1) {
      fail(ErrorCode::invalid_argument, "sequences: sequence " + std::to_string(id) + " is listed twice");
    }
    lengths.push_back(cache.length(id));  // raises for an unknown sequence
    const std::span<const std::int64_t> row = cache.block_table(id);
    table.insert(table.end(), row.begin(), row.end());
  }
  AttentionOptions a;
  a.scale = options.scale;
  a.causal = Causal::bottom_right;
  a.window = options.window;
  a.alibi_slopes = options.alibi_slopes;
  a.softcap = options.softcap;
  a.kernel = options.kernel;
  // Paged block sizes are powers of two (the cache checks); a contiguous slot is the sequence's only
  // block, so any shift past its length maps every key into it.
  const int shift = storage.blocks_per_sequence == 1 ? 62 : std::countr_zero(static_cast<std::uint64_t>(storage.block_size));
  const detail::CachedKeys cached{table.data(), storage.blocks_per_sequence, shift, lengths.data()};
  const std::int64_t m = lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end());
  detail::ForwardOutputs outputs;
  const detail::Problem problem =
      detail::validate_cached_forward(q, storage.keys, storage.values, cached, m, out, a, options.lse, outputs);
  const Kernel kernel = resolve_kernel(options.kernel, q.dtype());
  if (kernel == Kernel::fast) {
    detail::run_within_memory("attend", kernel, problem, cpu::fast_forward_scratch_bytes(problem, false),
                              [&] { cpu::fast_forward(problem, outputs); });
  } else {
    a.kernel = Kernel::reference;  // each sequence's forward call checks its own memory
    // The validated views: an empty one has zero strides, so taking entry b never steps a pointer
    // by strides validation had no reason to check (found by fuzz_validation).
    reference_attend(cache, sequences, problem.q, outputs.out, a, outputs.lse);
  }
}

}  // namespace

void attend(const KVCache& cache, std::span<const KVCache::SequenceId> sequences, ConstTensorView q, TensorView out,
            const CachedAttentionOptions& options) {
  detail::reporting_out_of_memory("attend", [&] { attend_sequences(cache, sequences, q, out, options); });
}

}  // namespace attnkit
