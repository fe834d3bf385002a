#include "cpu/forward.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "attnkit/targets.hpp"
#include "core/element_io.hpp"
#include "core/parallel_for.hpp"
#include "core/softmax_partial.hpp"
#include "core/visible_keys.hpp"
#include "cpu/call_scratch.hpp"
#include "cpu/kernels.hpp"
#include "cpu/workspace.hpp"

namespace attnkit::cpu {
namespace {

// Queries of one head per work item: the plan's and the scratch size's.
std::int64_t queries_per_item(const detail::Sizes& s, const Geometry& geometry) {
  return std::clamp<std::int64_t>(item_rows(geometry, s.group(), s.n) / s.group(), 1, s.n);
}

ForwardPlan make_plan(const detail::Problem& p, const detail::ForwardOutputs& outputs, const Geometry& geometry,
                      std::vector<std::int64_t>& sequence_items) {
  const detail::Sizes& s = p.sizes;
  ForwardPlan plan;
  plan.problem = &p;
  plan.outputs = &outputs;
  plan.group = s.group();
  plan.queries_per_item = queries_per_item(s, geometry);
  plan.query_blocks = ceil_div(s.n, plan.queries_per_item);
  plan.items = s.batch * s.kv_heads * plan.query_blocks;
  plan.splits = decode_splits(s.n, s.m);
  if (p.packed != nullptr) {
    // Each sequence's own blocks and splits (the longest sequence's query_blocks fix none of them).
    sequence_items.assign(static_cast<std::size_t>(s.batch + 1), 0);
    plan.splits = 1;
    for (std::int64_t b = 0; b < s.batch; ++b) {
      const std::int64_t blocks = ceil_div(p.query_count(b), plan.queries_per_item);
      sequence_items[static_cast<std::size_t>(b + 1)] = sequence_items[static_cast<std::size_t>(b)] + s.kv_heads * blocks;
      if (blocks > 0) plan.splits = std::max(plan.splits, decode_splits(p.query_count(b), p.key_count(b)));
    }
    plan.items = sequence_items.back();
    plan.sequence_items = sequence_items.data();
  }
  plan.padded_rows = round_up(plan.group * plan.queries_per_item, geometry.tile_rows);
  plan.padded_d_v = round_up(s.d_v, geometry.tile_cols());
  plan.short_decode_blocks = short_decode_blocks();
  return plan;
}

// Whether every split partial of the item's row r holds finite numbers only.
bool partials_finite(const ForwardPlan& plan, std::int64_t item_index, std::int64_t splits, std::int64_t r) {
  for (std::int64_t split = 0; split < splits; ++split) {
    const SplitPartial part = plan.partial(item_index, split, r);
    if (!std::isfinite(*part.sum) || !all_finite(part.acc, plan.padded_d_v)) return false;
  }
  return true;
}

// Merges an item's split partials in split order and finalizes its rows, summing in the first row
// of the thread's workspace accumulator (prepared for the call: no allocation here).
void merge_and_finalize(const ForwardPlan& plan, std::int64_t item_index) {
  const ItemCoordinates item = item_coordinates(plan, item_index);
  if (item.splits == 1) return;  // a packed sequence that does not decode: finalized by its item
  float* acc = thread_workspace().acc;
  const detail::Problem& p = *plan.problem;
  for (std::int64_t r = 0; r < plan.group * item.queries; ++r) {
    auto merge_splits = [&](float headroom) {
      std::fill(acc, acc + plan.padded_d_v, 0.0f);
      detail::SoftmaxPartial row{.max = -std::numeric_limits<float>::infinity(), .sum = 0, .acc = acc};
      for (std::int64_t split = 0; split < item.splits; ++split) {
        const SplitPartial part = plan.partial(item_index, split, r);
        row.merge(*part.max, *part.sum, part.acc, plan.padded_d_v, headroom);
      }
      return row;
    };
    detail::SoftmaxPartial row = merge_splits(0);
    // Finite partials whose merge overflowed (large values over many keys): merged again with
    // headroom, as run_item redoes an item (core/softmax_partial.hpp).
    if (!all_finite(acc, plan.padded_d_v) &&
        partials_finite(plan, item_index, item.splits, r)) {
      row = merge_splits(detail::SoftmaxPartial::headroom_for(p.key_count(item.batch), p.f32.keep_scale));
    }
    const std::int64_t head = item.kv_head * plan.group + r / item.queries, query = item.first_query + r % item.queries;
    finalize_row(plan, item_index, r, head, query, row);
  }
}

// probs[b, h] of a packed sequence past its own queries (rows) and keys (columns): zero, as for a row
// that sees no key. The items write the rest.
void zero_probs_padding(const detail::Problem& p, const TensorView& probs, std::int64_t b, std::int64_t h) {
  const detail::Sizes& s = p.sizes;
  const std::int64_t queries = p.query_count(b), keys = p.key_count(b);
  static constexpr float kZeros[kMaxKeyBlock] = {};
  for (std::int64_t i = 0; i < s.n; ++i) {
    for (std::int64_t j = i < queries ? keys : 0; j < s.m; j += kMaxKeyBlock) {
      detail::store_row_part(kZeros, probs, b, h, i, j, std::min(kMaxKeyBlock, s.m - j));
    }
  }
}

}  // namespace

void finalize_row(const ForwardPlan& plan, std::int64_t item, std::int64_t row, std::int64_t head, std::int64_t query,
                  detail::SoftmaxPartial partial) {
  const detail::Sizes& s = plan.problem->sizes;
  const std::int64_t batch = item_coordinates(plan, item).batch;
  const detail::StoredRow at = detail::query_row(*plan.problem, batch, query);
  // The sink joins the row once, after every key block's (and split's) partial has.
  if (!plan.problem->sinks.empty()) partial.add_sink(plan.problem->sinks[static_cast<std::size_t>(head)], s.d_v);
  float lse = partial.finalize(s.d_v);
  // A row that sees keys but whose every logit fell below float32's range (−inf by overflow) is not
  // an empty row: its softmax is outside what float32 computes, so it is NaN, never O = 0 with
  // lse = −inf (docs/semantics.md, Limits). Only rows that end empty pay for the check.
  if (lse == -std::numeric_limits<float>::infinity() &&
      detail::row_has_visible_key(*plan.problem, batch, head, query)) {
    std::fill(partial.acc, partial.acc + s.d_v, std::numeric_limits<float>::quiet_NaN());
    lse = std::numeric_limits<float>::quiet_NaN();
  }
  const TensorView& out = plan.outputs->out;
  if (out.dtype() == DType::bf16 && out.stride(3) == 1 && s.d_v > 0) {
    // The target's vector rounding: store_row_part, compiled for the baseline CPU, was 5% of a bf16
    // causal forward at n = m = 1024, d = 128 on an AVX-512 Zen 5 (docs/tuning.md, "Storing output
    // rows").
    plan.round_to_bf16(partial.acc, &out.at<bfloat16>({at.outer, head, at.row, 0})->bits, s.d_v);
  } else {
    detail::store_row_part(partial.acc, out, at.outer, head, at.row, 0, s.d_v);
  }
  if (plan.outputs->lse) *plan.outputs->lse->at<float>({at.outer, head, at.row}) = lse;
  if (plan.row_lse != nullptr) plan.row_lse[item * plan.padded_rows + row] = lse;
}

detail::ByteCount fast_forward_scratch_bytes(const detail::Problem& p, bool probs) {
  using detail::ByteCount;
  const detail::Sizes& s = p.sizes;
  if (s.batch == 0 || s.q_heads == 0 || s.n == 0) return 0;
  // make_plan's sizes, in saturating arithmetic: the sizes may be absurd (zero strides make huge
  // views cheap), and the answer must then be "too large", never a wrapped small number.
  const std::int64_t queries_per_item = cpu::queries_per_item(s, forward_kernels(kernel_target(p, Pass::forward)).geometry);
  const ByteCount rows = ByteCount::of(s.group()) * ByteCount::of(queries_per_item) + kMaxTileRows;
  const ByteCount padded_d_v = ByteCount::of(s.d_v) + kMaxTileCols;
  // A packed batch has a block per started block of each sequence: at most total/queries + B.
  const ByteCount query_blocks = p.packed != nullptr
                                     ? ByteCount::of(p.q.size(2) / queries_per_item) + ByteCount::of(s.batch)
                                     : ByteCount::of(s.batch) * ByteCount::of(ceil_div(s.n, queries_per_item));
  const ByteCount items = query_blocks * ByteCount::of(s.kv_heads);
  std::int64_t most_splits = decode_splits(s.n, s.m);
  if (p.packed != nullptr) {  // the sequences that decode split their keys, whatever the longest does
    most_splits = 1;
    for (std::int64_t b = 0; b < s.batch; ++b) most_splits = std::max(most_splits, decode_splits(p.query_count(b), p.key_count(b)));
  }
  const bool split = most_splits > 1;
  const ByteCount splits = ByteCount::of(most_splits);
  ByteCount call = p.packed != nullptr ? ByteCount::of(s.batch + 1) * sizeof(std::int64_t) : 0;
  if (split) call += items * splits * rows * (padded_d_v + 2) * sizeof(float);
  if (probs) call += items * rows * sizeof(float);
  const ByteCount per_thread = ForwardWorkspace::bytes_for(rows, ByteCount::of(s.d_k), padded_d_v);
  const ByteCount tasks = items * splits;
  return call + per_thread * std::min<std::uint64_t>(tasks.value(), static_cast<std::uint64_t>(num_threads()));
}

void fast_forward(const detail::Problem& p, const detail::ForwardOutputs& outputs) {
  const detail::Sizes& s = p.sizes;
  if (s.batch == 0 || s.q_heads == 0 || s.n == 0) return;  // every output is empty
  const ForwardKernels kernels = forward_kernels(kernel_target(p, Pass::forward));
  thread_local std::vector<std::int64_t> sequence_items;
  ForwardPlan plan = make_plan(p, outputs, kernels.geometry, sequence_items);
  plan.round_to_bf16 = kernels.round_to_bf16;

  thread_local std::vector<float> partials, row_lse;
  if (plan.splits > 1) plan.partials = scratch(partials, plan.items * plan.splits * plan.padded_rows * plan.partial_stride());
  if (outputs.probs) plan.row_lse = scratch(row_lse, plan.items * plan.padded_rows);

  // Every thread's workspace is sized for the largest item before any item runs: the items then
  // allocate nothing, and memory that runs out leaves every output untouched.
  detail::parallel_loops(
      [&] { thread_workspace().prepare(plan.padded_rows, s.d_k, plan.padded_d_v); },
      {{plan.items * plan.splits, [&](std::int64_t t) { kernels.run_item(plan, t / plan.splits, t % plan.splits); }},
       {plan.splits > 1 ? plan.items : 0, [&](std::int64_t item) { merge_and_finalize(plan, item); }},
       {outputs.probs ? plan.items : 0, [&](std::int64_t item) { kernels.run_probs_item(plan, item); }},
       {outputs.probs && p.packed != nullptr ? s.batch * s.q_heads : 0,
        [&](std::int64_t t) { zero_probs_padding(p, *outputs.probs, t / s.q_heads, t % s.q_heads); }}});
}

}  // namespace attnkit::cpu
