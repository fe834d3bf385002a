// Ring attention, forward: each rank's queries against every K/V block as the blocks travel the
// ring, partial results folded by their log-sum-exp.
#include <cmath>
#include <optional>
#include <utility>

#include "attnkit/attention.hpp"
#include "core/softmax_partial.hpp"
#include "dispatch/backends.hpp"
#include "dist/block_plan.hpp"
#include "dist/problem.hpp"
#include "dist/ring.hpp"
#include "dist/staging.hpp"

namespace attnkit::dist {

namespace {

constexpr int kKvTag = 801;

// Running softmax partials of the local query rows (core/softmax_partial.hpp). A block call's
// normalised (out, lse) is the partial (max = lse, sum = 1, acc = out), so the one merge function
// of the library folds ring blocks too. Each row folds at most `blocks` partials of weight 1, and
// folds them with the headroom of that many: Σ out · e^(lse − max) then stays below max |out|, so
// values near float32's largest cannot overflow the sum across blocks.
class RowPartials {
 public:
  RowPartials(std::int64_t B, std::int64_t H, std::int64_t n, std::int64_t dv, std::int64_t blocks)
      : B_(B), H_(H), n_(n), dv_(dv), headroom_(attnkit::detail::SoftmaxPartial::headroom_for(blocks, 1.0f)),
        acc_(DType::f32, {B, H, n, dv}), rows_(static_cast<std::size_t>(B * H * n)) {
    for (std::size_t row = 0; row < rows_.size(); ++row) rows_[row].acc = acc_.data<float>() + row * static_cast<std::size_t>(dv_);
  }

  // Folds a block's out [B, H, len, dv] and lse [B, H, len] into local rows [start, start + len).
  void fold(std::int64_t start, ConstTensorView out, ConstTensorView lse) {
    for (std::int64_t b = 0; b < B_; ++b)
      for (std::int64_t h = 0; h < H_; ++h)
        for (std::int64_t i = 0; i < out.size(2); ++i) {
          rows_[static_cast<std::size_t>((b * H_ + h) * n_ + start + i)].merge(*lse.at<float>({b, h, i}), 1.0f,
                                                                               out.at<float>({b, h, i, 0}), dv_, headroom_);
        }
  }

  // out = acc / sum and lse = max + log(sum); a row that saw no key gives out = 0, lse = −inf.
  void finish(TensorView out, TensorView lse) {
    Tensor lse32(DType::f32, {B_, H_, n_});
    for (std::size_t row = 0; row < rows_.size(); ++row) lse32.data<float>()[row] = rows_[row].finalize(dv_);
    detail::store(acc_, out);
    detail::store(lse32, lse);
  }

 private:
  std::int64_t B_, H_, n_, dv_;
  float headroom_;
  Tensor acc_;  // the rows' accumulators (zero-initialised)
  std::vector<attnkit::detail::SoftmaxPartial> rows_;
};

std::int64_t longest(const std::vector<Chunk>& chunks) {
  std::int64_t m = 0;
  for (const Chunk& c : chunks) m = std::max(m, c.length);
  return m;
}

}  // namespace

void ring_forward(MPI_Comm comm, ConstTensorView q, ConstTensorView k, ConstTensorView v, TensorView out,
                  TensorView lse, const RingOptions& options) {
  using namespace detail;
  const RingProblem p = make_problem("ring_forward", comm, RingArgs{.q = q, .k = k, .v = v, .out = out, .lse = lse, .d_out = {}, .dq = {}, .dk = {}, .dv = {}, .backward = false}, options);
  const int P = p.ranks;
  const std::vector<Chunk> mine = p.chunks_of(p.rank);
  const Tensor q32 = to_f32(q);
  BlockBuffer current(p.B, p.Hkv, p.max_length(), p.dk, p.dv), next = current;
  current.pack(k, v);
  std::int64_t blocks = 0;  // key chunks over the ring: each local row folds at most one partial per chunk
  for (int rank = 0; rank < P; ++rank) blocks += static_cast<std::int64_t>(p.chunks_of(rank).size());
  RowPartials partials(p.B, p.Hq, p.length(p.rank), p.dv, blocks);
  Tensor block_out(DType::f32, {p.B, p.Hq, longest(mine), p.dv}), block_lse(DType::f32, {p.B, p.Hq, longest(mine)});
  RingExchange ring(comm, kKvTag);
  std::vector<std::int64_t> key_lengths;
  if (options.stats) options.stats->steps.assign(static_cast<std::size_t>(P), {});

  // Step s: this rank holds the block of rank (rank − s) and, meanwhile, receives rank (rank − s − 1)'s.
  for (int s = 0; s < P; ++s) {
    const int origin = (p.rank - s + P) % P, incoming = (origin - 1 + P) % P;
    const std::int64_t rows_held = p.length(origin);
    RingStep step;
    if (s + 1 < P) {
      ring.start(current.data(), current.count(rows_held), next.data(), next.count(p.length(incoming)));
      step.bytes_sent = current.count(rows_held) * static_cast<std::int64_t>(sizeof(float));
    }
    const double begin = MPI_Wtime();
    for (const Chunk& kc : p.chunks_of(origin)) {
      for (const Chunk& qc : mine) {
        const std::optional<attnkit::detail::Problem> block = block_problem(
            p, qc, kc, rows(q32.view(), qc.local_start, qc.length), rows(current.k(rows_held), kc.local_start, kc.length),
            rows(current.v(rows_held), kc.local_start, kc.length), key_lengths);
        if (!block) continue;
        const TensorView bo = rows(block_out.view(), 0, qc.length), bl = rows(block_lse.view(), 0, qc.length);
        attnkit::detail::run_forward("ring_forward", *block, {bo, bl, std::nullopt});
        partials.fold(qc.local_start, bo, bl);
      }
    }
    step.compute_seconds = MPI_Wtime() - begin;
    if (s + 1 < P) {
      step.wait_seconds = ring.wait();
      std::swap(current, next);
    }
    if (options.stats) options.stats->steps[static_cast<std::size_t>(s)] = step;
  }
  partials.finish(out, lse);
}

}  // namespace attnkit::dist
