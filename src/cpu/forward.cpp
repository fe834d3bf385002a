#include "cpu/forward.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "attnkit/targets.hpp"
#include "core/element_io.hpp"
#include "core/parallel_for.hpp"
#include "core/softmax_partial.hpp"
#include "cpu/call_scratch.hpp"
#include "cpu/kernels.hpp"
#include "cpu/workspace.hpp"

namespace attnkit::cpu {
namespace {

ForwardPlan make_plan(const detail::Problem& p, const detail::ForwardOutputs& outputs, const Geometry& geometry) {
  const detail::Sizes& s = p.sizes;
  ForwardPlan plan;
  plan.problem = &p;
  plan.outputs = &outputs;
  plan.group = s.group();
  plan.queries_per_item = std::clamp<std::int64_t>(kRowsPerItem / plan.group, 1, s.n);
  plan.query_blocks = ceil_div(s.n, plan.queries_per_item);
  plan.items = s.batch * s.kv_heads * plan.query_blocks;
  // Decoding: few queries, many keys. Split the keys so that one query keeps every core busy; the
  // split size is fixed, so the result does not depend on the thread count.
  plan.splits = s.n <= kDecodeQueries && s.m > kSplitKeys ? ceil_div(s.m, kSplitKeys) : 1;
  plan.padded_rows = round_up(plan.group * plan.queries_per_item, geometry.tile_rows);
  plan.padded_d_v = round_up(s.d_v, geometry.tile_cols());
  return plan;
}

// Merges an item's split partials in split order and finalizes its rows, summing in the first row
// of the thread's workspace accumulator (prepared for the call: no allocation here).
void merge_and_finalize(const ForwardPlan& plan, std::int64_t item_index) {
  const ItemCoordinates item = item_coordinates(plan, item_index);
  float* acc = thread_workspace().acc;
  for (std::int64_t r = 0; r < plan.group * item.queries; ++r) {
    std::fill(acc, acc + plan.padded_d_v, 0.0f);
    detail::SoftmaxPartial row{.max = -std::numeric_limits<float>::infinity(), .sum = 0, .acc = acc};
    for (std::int64_t split = 0; split < plan.splits; ++split) {
      const float* part = plan.partial(item_index, split, r);
      row.merge(part[0], part[1], part + 2, plan.padded_d_v);
    }
    const std::int64_t head = item.kv_head * plan.group + r / item.queries, query = item.first_query + r % item.queries;
    finalize_row(plan, item_index, r, head, query, row);
  }
}

}  // namespace

void finalize_row(const ForwardPlan& plan, std::int64_t item, std::int64_t row, std::int64_t head, std::int64_t query,
                  detail::SoftmaxPartial partial) {
  const detail::Sizes& s = plan.problem->sizes;
  const std::int64_t batch = item_coordinates(plan, item).batch;
  const float lse = partial.finalize(s.d_v);
  detail::store_row_part(partial.acc, plan.outputs->out, batch, head, query, 0, s.d_v);
  if (plan.outputs->lse) *plan.outputs->lse->at<float>({batch, head, query}) = lse;
  if (plan.row_lse != nullptr) plan.row_lse[item * plan.padded_rows + row] = lse;
}

detail::ByteCount fast_forward_scratch_bytes(const detail::Problem& p, bool probs) {
  using detail::ByteCount;
  const detail::Sizes& s = p.sizes;
  if (s.batch == 0 || s.q_heads == 0 || s.n == 0) return 0;
  // make_plan's sizes, in saturating arithmetic: the sizes may be absurd (zero strides make huge
  // views cheap), and the answer must then be "too large", never a wrapped small number.
  const std::int64_t queries_per_item = std::clamp<std::int64_t>(kRowsPerItem / s.group(), 1, s.n);
  const ByteCount rows = ByteCount::of(s.group()) * ByteCount::of(queries_per_item) + kMaxTileRows;
  const ByteCount padded_d_v = ByteCount::of(s.d_v) + kMaxTileCols;
  const ByteCount items = ByteCount::of(s.batch) * ByteCount::of(s.kv_heads) * ByteCount::of(ceil_div(s.n, queries_per_item));
  const bool split = s.n <= kDecodeQueries && s.m > kSplitKeys;
  const ByteCount splits = split ? ByteCount::of(s.m / kSplitKeys + 1) : 1;
  ByteCount call = 0;
  if (split) call += items * splits * rows * (padded_d_v + 2) * sizeof(float);
  if (probs) call += items * rows * sizeof(float);
  const ByteCount per_thread = ForwardWorkspace::bytes_for(rows, ByteCount::of(s.d_k), padded_d_v);
  const ByteCount tasks = items * splits;
  return call + per_thread * std::min<std::uint64_t>(tasks.value(), static_cast<std::uint64_t>(num_threads()));
}

void fast_forward(const detail::Problem& p, const detail::ForwardOutputs& outputs) {
  const detail::Sizes& s = p.sizes;
  if (s.batch == 0 || s.q_heads == 0 || s.n == 0) return;  // every output is empty
  const ForwardKernels kernels = forward_kernels(p.target);
  ForwardPlan plan = make_plan(p, outputs, kernels.geometry);

  thread_local std::vector<float> partials, row_lse;
  if (plan.splits > 1) plan.partials = scratch(partials, plan.items * plan.splits * plan.padded_rows * plan.partial_stride());
  if (outputs.probs) plan.row_lse = scratch(row_lse, plan.items * plan.padded_rows);

  // Every thread's workspace is sized for the largest item before any item runs: the items then
  // allocate nothing, and memory that runs out leaves every output untouched.
  detail::parallel_loops(
      [&] { thread_workspace().prepare(plan.padded_rows, s.d_k, plan.padded_d_v); },
      {{plan.items * plan.splits, [&](std::int64_t t) { kernels.run_item(plan, t / plan.splits, t % plan.splits); }},
       {plan.splits > 1 ? plan.items : 0, [&](std::int64_t item) { merge_and_finalize(plan, item); }},
       {outputs.probs ? plan.items : 0, [&](std::int64_t item) { kernels.run_probs_item(plan, item); }}});
}

}  // namespace attnkit::cpu
