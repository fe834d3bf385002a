// Ring attention, backward (FlashAttention-style): every block pair runs the fast backward with the
// FINAL out and lse, which give the exact global softmax restricted to the block:
//   P_ij = exp(s_ij − lse_i),   D_i = rowsum(dO_i ∘ O_i),   dS = P ∘ (dP − D)
// so block gradients simply add. dq accumulates on its own rank; dk/dv partials travel the ring
// with their K/V block, each rank adding its contribution, and come home with one last hop.
#include <utility>

#include "attnkit/attention.hpp"
#include "dispatch/backends.hpp"
#include "dist/block_plan.hpp"
#include "dist/problem.hpp"
#include "dist/ring.hpp"
#include "dist/staging.hpp"

namespace attnkit::dist {

namespace {

constexpr int kKvTag = 802, kGradTag = 803;

std::int64_t longest(const std::vector<Chunk>& chunks) {
  std::int64_t m = 0;
  for (const Chunk& c : chunks) m = std::max(m, c.length);
  return m;
}

// Elementwise a += b over the first `count` floats.
void accumulate(float* a, const float* b, std::int64_t count) {
  for (std::int64_t i = 0; i < count; ++i) a[i] += b[i];
}

}  // namespace

void ring_backward(MPI_Comm comm, ConstTensorView q, ConstTensorView k, ConstTensorView v, ConstTensorView out,
                   ConstTensorView d_out, ConstTensorView lse, TensorView dq, TensorView dk, TensorView dv,
                   const RingOptions& options) {
  using namespace detail;
  const RingProblem p = make_problem(
      "ring_backward", comm,
      RingArgs{.q = q, .k = k, .v = v, .out = out, .lse = lse, .d_out = d_out, .dq = dq, .dk = dk, .dv = dv, .backward = true},
      options);
  const int P = p.ranks;
  const std::vector<Chunk> mine = p.chunks_of(p.rank);
  const std::int64_t n = p.length(p.rank), chunk_rows = longest(mine);
  const Tensor q32 = to_f32(q), out32 = to_f32(out), d_out32 = to_f32(d_out), lse32 = to_f32(lse);

  // K/V blocks travel as in the forward; their gradients follow one step behind, in three buffers:
  // this step's contribution, the running sum arriving from the previous rank, the one leaving.
  BlockBuffer current(p.B, p.Hkv, p.max_length(), p.dk, p.dv), next = current;
  BlockBuffer contribution = current, arriving = current, leaving = current;
  current.pack(k, v);
  Tensor dq32(DType::f32, {p.B, p.Hq, n, p.dk});
  Tensor block_dq(DType::f32, {p.B, p.Hq, chunk_rows, p.dk});
  Tensor block_dk(DType::f32, {p.B, p.Hkv, p.max_length(), p.dk}), block_dv(DType::f32, {p.B, p.Hkv, p.max_length(), p.dv});
  RingExchange kv_ring(comm, kKvTag), grad_ring(comm, kGradTag);
  std::vector<std::int64_t> key_lengths;
  if (options.stats) options.stats->steps.assign(static_cast<std::size_t>(P), {});

  for (int s = 0; s < P; ++s) {
    const int origin = (p.rank - s + P) % P, incoming = (origin - 1 + P) % P;
    const std::int64_t rows_held = p.length(origin);
    RingStep step;
    if (s + 1 < P) {
      kv_ring.start(current.data(), current.count(rows_held), next.data(), next.count(p.length(incoming)));
      step.bytes_sent += current.count(rows_held) * static_cast<std::int64_t>(sizeof(float));
    }
    // 1. This rank's contribution to the held block's dk/dv, and to its own dq.
    const double begin = MPI_Wtime();
    contribution.zero(rows_held);
    for (const Chunk& kc : p.chunks_of(origin)) {
      for (const Chunk& qc : mine) {
        const std::optional<attnkit::detail::Problem> block = block_problem(
            p, qc, kc, rows(q32.view(), qc.local_start, qc.length), rows(current.k(rows_held), kc.local_start, kc.length),
            rows(current.v(rows_held), kc.local_start, kc.length), key_lengths);
        if (!block) continue;
        const TensorView bdq = rows(block_dq.view(), 0, qc.length);
        const TensorView bdk = rows(block_dk.view(), 0, kc.length), bdv = rows(block_dv.view(), 0, kc.length);
        attnkit::detail::run_backward("ring_backward", *block,
                                      {rows(out32.view(), qc.local_start, qc.length), rows(d_out32.view(), qc.local_start, qc.length),
                                       rows(lse32.view(), qc.local_start, qc.length), bdq, bdk, bdv, std::nullopt});
        add_rows(dq32.view(), qc.local_start, bdq);
        add_rows(contribution.k(rows_held), kc.local_start, bdk);
        add_rows(contribution.v(rows_held), kc.local_start, bdv);
      }
    }
    step.compute_seconds = MPI_Wtime() - begin;
    // 2. Add the sum of the ranks before this one (it arrived during the compute) and pass it on.
    //    After step P − 1 the block of rank + 1 goes home to rank + 1, and this rank's own arrives.
    step.wait_seconds += grad_ring.wait();
    if (s > 0) accumulate(contribution.data(), arriving.data(), contribution.count(rows_held));
    std::swap(contribution, leaving);
    if (P > 1) {  // with one rank the sum is already home: no message to itself
      grad_ring.start(leaving.data(), leaving.count(rows_held), arriving.data(), arriving.count(p.length(incoming)));
      step.bytes_sent += leaving.count(rows_held) * static_cast<std::int64_t>(sizeof(float));
    }
    if (s + 1 < P) {
      step.wait_seconds += kv_ring.wait();
      std::swap(current, next);
    }
    if (options.stats) options.stats->steps[static_cast<std::size_t>(s)] = step;
  }
  const double begin_home = MPI_Wtime();
  grad_ring.wait();  // `arriving` now holds this rank's own dk/dv, summed over every rank's queries
  if (options.stats) options.stats->steps.back().wait_seconds += MPI_Wtime() - begin_home;
  BlockBuffer& home = P > 1 ? arriving : leaving;

  store(dq32, dq);
  store(Tensor::converted(home.k(n), DType::f32), dk);
  store(Tensor::converted(home.v(n), DType::f32), dv);
}

}  // namespace attnkit::dist
