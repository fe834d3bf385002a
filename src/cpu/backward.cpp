#include "cpu/backward.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "attnkit/targets.hpp"
#include "core/element_io.hpp"
#include "core/parallel_for.hpp"
#include "cpu/call_scratch.hpp"
#include "cpu/kernels.hpp"
#include "cpu/workspace.hpp"

namespace attnkit::cpu {
namespace {

#include "cpu/bf16_bits.inl"

// How `keys` keys are chunked when `entries` (batch, KV head) pairs share the call: few pairs,
// and their keys are split into chunks so that every core has work. The chunking depends only on
// the shapes, never on the thread count.
BackwardEntry chunked(std::int64_t keys, std::int64_t entries, std::int64_t key_block) {
  const std::int64_t blocks = ceil_div(keys, key_block);
  const std::int64_t wanted = std::clamp<std::int64_t>(ceil_div(kBackwardMinItems, entries), 1, std::max<std::int64_t>(blocks, 1));
  BackwardEntry e;
  e.chunk_keys = std::max<std::int64_t>(ceil_div(blocks, wanted), 1) * key_block;
  e.chunks = ceil_div(keys, e.chunk_keys);
  return e;
}

BackwardPlan make_plan(const detail::Problem& p, const detail::BackwardIO& io, const Geometry& geometry,
                       std::vector<BackwardEntry>& packed_entries) {
  const detail::Sizes& s = p.sizes;
  BackwardPlan plan;
  plan.problem = &p;
  plan.io = &io;
  plan.group = s.group();
  plan.padded_d_k = round_up(s.d_k, geometry.tile_cols());
  plan.padded_d_v = round_up(s.d_v, geometry.tile_cols());
  if (p.packed == nullptr) {
    plan.uniform = chunked(s.m, s.batch * s.kv_heads, geometry.backward_key_block);
    plan.uniform.padded_n = round_up(s.n, geometry.tile_rows);
    plan.chunks = plan.uniform.chunks;
    plan.items = s.batch * s.kv_heads * plan.chunks;
    plan.rows = s.batch * s.q_heads * plan.uniform.padded_n;
    return plan;
  }
  // Each sequence as a call on it alone: its KV heads are the only pairs.
  packed_entries.resize(static_cast<std::size_t>(s.batch));
  for (std::int64_t b = 0; b < s.batch; ++b) {
    BackwardEntry& e = packed_entries[static_cast<std::size_t>(b)];
    e = chunked(p.key_count(b), s.kv_heads, geometry.backward_key_block);
    e.padded_n = round_up(p.query_count(b), geometry.tile_rows);
    e.first_item = plan.items;
    e.first_row = plan.rows;
    plan.items += s.kv_heads * e.chunks;
    plan.rows += s.q_heads * e.padded_n;
    plan.chunks = std::max(plan.chunks, e.chunks);
  }
  plan.packed_entries = packed_entries.data();
  return plan;
}

// The rows of one (batch, query head): Q and dO in float32 (zero-padded), the forward's LSE, and
// D_i = Σ_c dO[i, c] · O[i, c], summed in double since every dS of the row subtracts it.
void prepare_head(const BackwardPlan& plan, std::int64_t batch, std::int64_t head) {
  const detail::Problem& p = *plan.problem;
  const detail::Sizes& s = p.sizes;
  float* out_row = thread_backward_workspace().out_row;  // prepared for the call: no allocation here
  const std::int64_t padded_n = plan.entry(batch).padded_n, queries = p.query_count(batch);
  for (std::int64_t i = 0; i < padded_n; ++i) {
    const std::int64_t row = plan.row(batch, head, i);
    float* q = plan.q + row * plan.padded_d_k;
    float* d_out = plan.d_out + row * plan.padded_d_v;
    std::fill(q, q + plan.padded_d_k, 0.0f);
    std::fill(d_out, d_out + plan.padded_d_v, 0.0f);
    if (i >= queries) {  // padding: sees no key, adds nothing
      plan.lse[row] = -std::numeric_limits<float>::infinity();
      plan.delta[row] = 0;
      plan.finite[row] = kQueryFinite | kGradientFinite;
      continue;
    }
    const detail::StoredRow at = detail::query_row(p, batch, i);
    detail::load_row(p.q, at.outer, head, at.row, q, s.d_k);
    detail::load_row(plan.io->d_out, at.outer, head, at.row, d_out, s.d_v);
    if (plan.gradient_exponent != 0) {
      for (std::int64_t c = 0; c < s.d_v; ++c) d_out[c] = std::ldexp(d_out[c], -plan.gradient_exponent);
    }
    detail::load_row(plan.io->out, at.outer, head, at.row, out_row, s.d_v);
    double delta = 0;
    for (std::int64_t c = 0; c < s.d_v; ++c) delta += static_cast<double>(d_out[c]) * out_row[c];
    plan.delta[row] = static_cast<float>(delta);
    plan.lse[row] = *plan.io->lse.at<float>({at.outer, head, at.row});
    plan.finite[row] = static_cast<std::uint8_t>((all_finite(q, s.d_k) ? kQueryFinite : 0) |
                                                 (all_finite(d_out, s.d_v) ? kGradientFinite : 0));
  }
  if (plan.q_bf16 == nullptr) return;
  // For bf16 dot products: the rows just loaded (bf16 inputs, widened exactly) as bf16 bits, and as
  // pairs of consecutive rows; padded_n is even, so the pairs stay within the head.
  const std::int64_t first = plan.row(batch, head, 0);
  for (std::int64_t row = first; row < first + padded_n; ++row) {
    bf16_bits_of_row(plan.q + row * plan.padded_d_k, plan.padded_d_k, plan.q_bf16 + row * plan.padded_d_k);
    bf16_bits_of_row(plan.d_out + row * plan.padded_d_v, plan.padded_d_v, plan.d_out_bf16 + row * plan.padded_d_v);
  }
  for (std::int64_t row = first; row < first + padded_n; row += 2) {
    pairs_of_rows(plan.q + row * plan.padded_d_k, plan.q + (row + 1) * plan.padded_d_k, plan.padded_d_k,
                  plan.q_row_pairs + row / 2 * plan.padded_d_k);
    pairs_of_rows(plan.d_out + row * plan.padded_d_v, plan.d_out + (row + 1) * plan.padded_d_v, plan.padded_d_v,
                  plan.d_out_row_pairs + row / 2 * plan.padded_d_v);
  }
}

// dQ[b, h, i] = Σ over the entry's chunks, in chunk order, of each chunk's contribution.
void reduce_dq_head(const BackwardPlan& plan, std::int64_t batch, std::int64_t head) {
  const detail::Problem& p = *plan.problem;
  const std::int64_t d_k = p.sizes.d_k, chunks = plan.entry(batch).chunks;
  float* sum = thread_backward_workspace().dq_row;  // prepared for the call: no allocation here
  for (std::int64_t i = 0; i < p.query_count(batch); ++i) {
    const std::int64_t row = plan.row(batch, head, i);
    std::fill(sum, sum + d_k, 0.0f);
    for (std::int64_t chunk = 0; chunk < chunks; ++chunk) {
      const float* part = plan.dq_partial(chunk, row);
      for (std::int64_t c = 0; c < d_k; ++c) sum[c] += part[c];
    }
    const detail::StoredRow at = detail::query_row(p, batch, i);
    finish_gradient_row(plan, sum, d_k);
    detail::store_row_part(sum, plan.io->dq, at.outer, head, at.row, 0, d_k);
  }
}

// The largest |x| over a view's elements, NaN if one is NaN (rows read as float32, a chunk at a time).
float largest_magnitude(const ConstTensorView& t) {
  constexpr std::int64_t kChunk = 256;
  float chunk[kChunk];
  float largest = 0;
  for (std::int64_t a = 0; a < t.size(0); ++a)
    for (std::int64_t h = 0; h < t.size(1); ++h)
      for (std::int64_t i = 0; i < t.size(2); ++i)
        for (std::int64_t c0 = 0; c0 < t.size(3); c0 += kChunk) {
          const std::int64_t count = std::min(kChunk, t.size(3) - c0);
          detail::load_row_part(t, a, h, i, c0, chunk, count);
          for (std::int64_t c = 0; c < count; ++c) {
            if (std::isnan(chunk[c])) return NAN;
            largest = std::max(largest, std::fabs(chunk[c]));
          }
        }
  return largest;
}

// The exponent e for a second run whose dO is scaled by 2^−e (BackwardPlan::gradient_exponent), or 0
// when there is no point: an input holds NaN or ±inf, and the gradients are non-finite because of
// it. Every intermediate is bounded by its inputs' magnitudes: dP = dO·v and D = dO·O by
// d_v·|dO|·max(|v|, |O|), dS by twice that times the dropout weight, the sums of dQ and dK by
// max(n, m) such terms times scale·max(|q|, |k|, 1), and those of dV = Pᵀ·dO by max(n, m) times the
// dropout weight times |dO| (which bounds even when v and O are zero); e brings that bound below 2^120.
int gradient_exponent_for(const detail::Problem& p, const detail::BackwardIO& io) {
  const float q = largest_magnitude(p.q), k = largest_magnitude(p.k), v = largest_magnitude(p.v),
              out = largest_magnitude(io.out), d_out = largest_magnitude(io.d_out);
  for (float x : {q, k, v, out, d_out})
    if (!std::isfinite(x)) return 0;
  const detail::Sizes& s = p.sizes;
  const double terms = static_cast<double>(std::max<std::int64_t>({s.n, s.m, 1}));
  const double score_sums = 2.0 * static_cast<double>(std::max<std::int64_t>(s.d_v, 1)) * d_out * std::max(v, out) *
                            p.f32.keep_scale * terms * std::max({1.0, p.scale * q, p.scale * k});
  const double bound = std::max(score_sums, p.f32.keep_scale * terms * d_out);
  // Zero (dO all zero) leaves nothing to scale; infinite (a scale near the double range) is beyond
  // what a power of two within float32's exponents brings back.
  if (!(bound > 0) || !std::isfinite(bound)) return 0;
  const int exponent = std::ilogb(bound) - 120;
  return exponent > 0 ? exponent : 0;
}

// Every gradient is empty (dQ, dK and dV have the shapes of Q, K and V): nothing to compute and no
// workspace to size, however large the feature sizes of the empty views are.
bool no_gradient_to_write(const detail::Problem& p) { return p.q.numel() == 0 && p.k.numel() == 0 && p.v.numel() == 0; }

}  // namespace

detail::ByteCount fast_backward_scratch_bytes(const detail::Problem& p) {
  using detail::ByteCount;
  const detail::Sizes& s = p.sizes;
  // Two rows of out and dO for the sinks' gradients (store_sink_gradients), whatever else runs.
  const detail::ByteCount sink_rows = p.sinks.empty() ? 0 : 2 * detail::ByteCount::of(s.d_v) * sizeof(float);
  if (s.batch == 0 || s.kv_heads == 0 || no_gradient_to_write(p)) return sink_rows;
  // make_plan's sizes in saturating arithmetic (zero strides make absurd sizes cheap to pass).
  // Rows of every (batch, query head), padded; a packed batch's are its sequences' own.
  const ByteCount queries = p.packed != nullptr ? ByteCount::of(p.q.size(2)) + ByteCount::of(s.batch) * kMaxTileRows
                                                : ByteCount::of(s.batch) * (ByteCount::of(s.n) + kMaxTileRows);
  const ByteCount rows = queries * ByteCount::of(s.q_heads);
  const ByteCount padded_d_k = ByteCount::of(s.d_k) + kMaxTileCols, padded_d_v = ByteCount::of(s.d_v) + kMaxTileCols;
  const ByteCount chunks = static_cast<std::uint64_t>(kBackwardMinItems);  // make_plan never makes more
  ByteCount call = rows * (padded_d_k + padded_d_v + 2) * sizeof(float) + rows +  // q, d_out, lse, delta, finite
                   chunks * rows * padded_d_k * sizeof(float) +                  // dq_partials
                   (p.packed != nullptr ? ByteCount::of(s.batch) * sizeof(BackwardEntry) : 0);
  // bf16 inputs may take bf16 dot products: Q and dO as bf16 rows and as row pairs, 4 bytes per
  // element in all (counted whatever the target, an upper bound).
  if (p.q.dtype() == DType::bf16) call += rows * (padded_d_k + padded_d_v) * 4;
  const ByteCount per_thread = BackwardWorkspace::bytes_for(padded_d_k, padded_d_v);
  return call + per_thread * static_cast<std::uint64_t>(num_threads()) + sink_rows;
}

namespace {

// ∂L/∂sink_h = −Σ over the rows i of head h of e^(sink_h − lse_i) · D_i, D_i = dO_i · out_i: raising a
// sink scales each weight of its rows by 1 − p_sink (docs/semantics.md, Gradients). In double, the
// rows in order, so the same bits for any thread count. `row` holds two rows of d_v floats.
void store_sink_gradients(const detail::Problem& p, const detail::BackwardIO& io, float* row) {
  const detail::Sizes& s = p.sizes;
  float *out = row, *d_out = row + s.d_v;
  for (std::int64_t h = 0; h < s.q_heads; ++h) {
    const double sink = p.sinks[static_cast<std::size_t>(h)];
    double total = 0.0;
    for (std::int64_t b = 0; b < s.batch; ++b) {
      for (std::int64_t i = 0; i < p.query_count(b); ++i) {
        const detail::StoredRow at = detail::query_row(p, b, i);
        detail::load_row(io.out, at.outer, h, at.row, out, s.d_v);
        detail::load_row(io.d_out, at.outer, h, at.row, d_out, s.d_v);
        double delta = 0.0;
        for (std::int64_t c = 0; c < s.d_v; ++c) delta += static_cast<double>(d_out[c]) * out[c];
        total += std::exp(sink - *io.lse.at<float>({at.outer, h, at.row})) * delta;
      }
    }
    *io.d_sinks->at<float>({h}) = static_cast<float>(-total);
  }
}

void fast_gradients(const detail::Problem& p, const detail::BackwardIO& io) {
  const detail::Sizes& s = p.sizes;
  if (s.batch == 0 || s.kv_heads == 0 || no_gradient_to_write(p)) return;
  const BackwardKernels kernels = backward_kernels(kernel_target(p, Pass::backward));
  thread_local std::vector<BackwardEntry> packed_entries;
  BackwardPlan plan = make_plan(p, io, kernels.geometry, packed_entries);

  thread_local std::vector<float> q, d_out, lse, delta, dq_partials;
  thread_local std::vector<std::uint8_t> finite;
  const std::int64_t rows = plan.rows;
  plan.q = scratch(q, rows * plan.padded_d_k);
  plan.d_out = scratch(d_out, rows * plan.padded_d_v);
  plan.lse = scratch(lse, rows);
  plan.delta = scratch(delta, rows);
  plan.finite = scratch(finite, rows);
  plan.dq_partials = scratch(dq_partials, plan.chunks * rows * plan.padded_d_k);
  if (kernels.dot_bf16 && p.q.dtype() == DType::bf16) {  // q, k, v, out and dO share one dtype
    thread_local std::vector<std::uint16_t> q_bf16, d_out_bf16;
    thread_local std::vector<std::uint32_t> q_row_pairs, d_out_row_pairs;
    plan.q_bf16 = scratch(q_bf16, rows * plan.padded_d_k);
    plan.d_out_bf16 = scratch(d_out_bf16, rows * plan.padded_d_v);
    plan.q_row_pairs = scratch(q_row_pairs, rows / 2 * plan.padded_d_k);
    plan.d_out_row_pairs = scratch(d_out_row_pairs, rows / 2 * plan.padded_d_v);
  }

  // Every thread's workspace is sized before any task runs: the tasks then allocate nothing, and
  // memory that runs out leaves every gradient untouched.
  const std::int64_t heads = s.batch * s.q_heads;
  std::atomic<bool> stored_non_finite{false};
  plan.stored_non_finite = &stored_non_finite;
  auto run = [&] {
    detail::parallel_loops([&] { thread_backward_workspace().prepare(plan.padded_d_k, plan.padded_d_v); },
                           {{heads, [&](std::int64_t t) { prepare_head(plan, t / s.q_heads, t % s.q_heads); }},
                            {plan.items, [&](std::int64_t item) { kernels.run_item(plan, item); }},
                            {heads, [&](std::int64_t t) { reduce_dq_head(plan, t / s.q_heads, t % s.q_heads); }}});
  };
  run();
  // Intermediates such as dP = dO·v can overflow float32 while the gradients are finite: on finite
  // inputs the call runs again with dO scaled down, which costs nothing unless a gradient overflowed.
  if (stored_non_finite.load()) {
    plan.gradient_exponent = gradient_exponent_for(p, io);
    if (plan.gradient_exponent != 0) run();
  }
}

}  // namespace

void fast_backward(const detail::Problem& p, const detail::BackwardIO& io) {
  thread_local std::vector<float> sink_rows;
  float* rows = io.d_sinks ? scratch(sink_rows, 2 * p.sizes.d_v) : nullptr;  // before any gradient is written
  fast_gradients(p, io);
  if (io.d_sinks) store_sink_gradients(p, io, rows);
}

}  // namespace attnkit::cpu
