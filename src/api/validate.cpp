// Argument checking of the batched and cached calls: shapes, dtypes, options, pointers, overlap, size
// overflow. The checks they share with packed batches are in argument_checks.cpp.
#include "api/validate.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "api/argument_checks.hpp"
#include "attnkit/error.hpp"

namespace attnkit::detail {
namespace {

using std::int64_t;

// q, k, v in the batched layout, and the options, checked and resolved into a problem.
Problem make_problem(ConstTensorView q, ConstTensorView k, ConstTensorView v, const AttentionOptions& options) {
  Problem p;
  p.sizes = check_qkv(q, k, v);
  p.q = without_strides_if_empty(q);
  p.k = without_strides_if_empty(k);
  p.v = without_strides_if_empty(v);
  resolve_options(p, options, q.dtype());
  check_key_lengths(options, p.sizes);
  check_alibi(options, p.sizes);
  check_sinks(options, p.sizes);
  resolve_mask(options, p.sizes, p);
  return p;
}

// The inputs a batched call's outputs must not overlap.
std::vector<ByteSpan> input_spans(const Problem& p) {
  std::vector<ByteSpan> spans = {span_of("q", p.q), span_of("k", p.k), span_of("v", p.v)};
  if (p.mask_kind != MaskKind::none) spans.push_back(span_of("mask", p.mask));
  return spans;
}

}  // namespace

Problem validate_forward(ConstTensorView q, ConstTensorView k, ConstTensorView v, TensorView out,
                         const AttentionOptions& options, const ForwardExtras& extras, ForwardOutputs& outputs) {
  Problem p = make_problem(q, k, v, options);
  const Sizes& s = p.sizes;
  check_same_dtype("out", out, q);
  check_output("out", out, {s.batch, s.q_heads, s.n, s.d_v}, "[B, Hq, n, d_v]");
  std::vector<ByteSpan> spans = {span_of("out", out)};
  if (extras.lse) {
    if (extras.lse->dtype() != DType::f32) {
      fail(ErrorCode::invalid_dtype, describe("lse", *extras.lse) + ": lse is always f32");
    }
    check_output("lse", *extras.lse, {s.batch, s.q_heads, s.n}, "[B, Hq, n]");
    spans.push_back(span_of("lse", *extras.lse));
  }
  if (extras.probs) {
    if (!is_floating(extras.probs->dtype())) {
      fail(ErrorCode::invalid_dtype, describe("probs", *extras.probs) + ": probs takes a floating dtype");
    }
    check_output("probs", *extras.probs, {s.batch, s.q_heads, s.n, s.m}, "[B, Hq, n, m]");
    spans.push_back(span_of("probs", *extras.probs));
  }
  check_no_overlap(spans, input_spans(p));
  outputs = ForwardOutputs{without_strides_if_empty(out), without_strides_if_empty(extras.lse),
                           without_strides_if_empty(extras.probs)};
  return p;
}

Problem validate_cached_forward(ConstTensorView q, ConstTensorView k_pool, ConstTensorView v_pool, const CachedKeys& cached,
                                int64_t m, TensorView out, const CachedAttentionOptions& cached_options,
                                ForwardOutputs& outputs) {
  // Attention over a cache is attention with bottom-right causal alignment over each sequence's keys
  // (attnkit/kv_cache.hpp): its options are those of AttentionOptions, resolved the same way.
  AttentionOptions options;
  options.scale = cached_options.scale;
  options.causal = Causal::bottom_right;
  options.window = cached_options.window;
  options.alibi_slopes = cached_options.alibi_slopes;
  options.softcap = cached_options.softcap;
  options.sinks = cached_options.sinks;
  options.kernel = cached_options.kernel;
  const std::optional<TensorView>& lse = cached_options.lse;
  check_rank("q", q, 4, "[batch, heads, n, d_k]");
  if (!is_floating(q.dtype())) fail(ErrorCode::invalid_dtype, describe("q", q) + ": attention takes f64, f32, f16 or bf16");
  check_view_basics("q", q);
  Problem p;
  Sizes& s = p.sizes;
  s.batch = q.size(0);
  s.q_heads = q.size(1);
  s.n = q.size(2);
  s.d_k = q.size(3);
  s.kv_heads = k_pool.size(1);
  s.m = m;
  s.d_v = v_pool.size(3);
  const std::string all = " (" + describe("q", q) + ", cache of " + std::to_string(s.kv_heads) + " KV heads, d_k " +
                          std::to_string(k_pool.size(3)) + ", d_v " + std::to_string(s.d_v) + ")";
  if (k_pool.size(3) != s.d_k) {
    fail(ErrorCode::invalid_shape, "q: key dimension " + std::to_string(s.d_k) + " does not match the cache's " +
                                       std::to_string(k_pool.size(3)) + all);
  }
  if (s.q_heads % s.kv_heads != 0) {
    fail(ErrorCode::invalid_shape, "q: query heads " + std::to_string(s.q_heads) + " must be a multiple of the cache's " +
                                       std::to_string(s.kv_heads) + " key/value heads (GQA/MQA)" + all);
  }
  p.q = without_strides_if_empty(q);
  p.k = k_pool;
  p.v = v_pool;
  resolve_options(p, options, q.dtype());
  check_alibi(options, s);
  check_sinks(options, s);
  p.cached = &cached;

  check_same_dtype("out", out, q);
  check_output("out", out, {s.batch, s.q_heads, s.n, s.d_v}, "[B, Hq, n, d_v]");
  std::vector<ByteSpan> spans = {span_of("out", out)};
  if (lse) {
    if (lse->dtype() != DType::f32) fail(ErrorCode::invalid_dtype, describe("lse", *lse) + ": lse is always f32");
    check_output("lse", *lse, {s.batch, s.q_heads, s.n}, "[B, Hq, n]");
    spans.push_back(span_of("lse", *lse));
  }
  check_no_overlap(spans, {span_of("q", q), span_of("the cache's keys", k_pool), span_of("the cache's values", v_pool)});
  outputs = ForwardOutputs{without_strides_if_empty(out), without_strides_if_empty(lse), std::nullopt};
  return p;
}

Problem validate_backward(ConstTensorView q, ConstTensorView k, ConstTensorView v, const BackwardIO& io,
                          const AttentionOptions& options) {
  Problem p = make_problem(q, k, v, options);
  const Sizes& s = p.sizes;
  const std::vector<int64_t> o_shape = {s.batch, s.q_heads, s.n, s.d_v};
  for (auto [name, view] : {std::pair{"out", io.out}, std::pair{"d_out", io.d_out}}) {
    check_same_dtype(name, view, q);
    check_shape(name, view, o_shape, "[B, Hq, n, d_v]");
    check_view_basics(name, view);
  }
  if (io.lse.dtype() != DType::f32) fail(ErrorCode::invalid_dtype, describe("lse", io.lse) + ": lse is always f32");
  check_shape("lse", io.lse, {s.batch, s.q_heads, s.n}, "[B, Hq, n]");
  check_view_basics("lse", io.lse);

  check_same_dtype("dq", io.dq, q);
  check_same_dtype("dk", io.dk, q);
  check_same_dtype("dv", io.dv, q);
  check_output("dq", io.dq, {s.batch, s.q_heads, s.n, s.d_k}, "(the shape of q)");
  check_output("dk", io.dk, {s.batch, k.size(1), s.m, s.d_k}, "(the shape of k)");
  check_output("dv", io.dv, {s.batch, v.size(1), s.m, s.d_v}, "(the shape of v)");
  check_sink_gradient(options, s, io.d_sinks);

  std::vector<ByteSpan> inputs = input_spans(p);
  inputs.push_back(span_of("out", io.out));
  inputs.push_back(span_of("d_out", io.d_out));
  inputs.push_back(span_of("lse", io.lse));
  check_no_overlap(gradient_spans(io), inputs);
  return p;
}

}  // namespace attnkit::detail
