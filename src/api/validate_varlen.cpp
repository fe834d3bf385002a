// Argument checking of packed variable-length batches (attnkit/varlen.hpp): their offsets, and their
// views read as a batch of one.
#include "api/validate.hpp"

#include <algorithm>
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

// A packed [total, H, d] view as the rank-4 [1, H, total, d] the kernels index: sequence rows are
// rows of dimension 2 (core/problem.hpp, query_row and stored_row).
template <class View>
View as_one_batch(const View& packed) {
  const int64_t sizes[4] = {1, packed.size(1), packed.size(0), packed.size(2)};
  const int64_t strides[4] = {0, packed.stride(1), packed.stride(0), packed.stride(2)};
  return without_strides_if_empty(View(packed.data(), packed.dtype(), sizes, strides, 4));
}

// lse [Hq, total_q] as [1, Hq, total_q].
template <class View>
View lse_as_one_batch(const View& lse) {
  const int64_t sizes[3] = {1, lse.size(0), lse.size(1)};
  const int64_t strides[3] = {0, lse.stride(0), lse.stride(1)};
  return without_strides_if_empty(View(lse.data(), lse.dtype(), sizes, strides, 3));
}

std::vector<int64_t> read_offsets(const char* name, ConstTensorView offsets, const char* tensor, int64_t total) {
  check_rank(name, offsets, 1, "[B + 1]");
  if (offsets.dtype() != DType::i32 && offsets.dtype() != DType::i64) {
    fail(ErrorCode::invalid_dtype, describe(name, offsets) + ": offsets are i32 or i64");
  }
  check_view_basics(name, offsets);
  if (offsets.size(0) == 0) {
    fail(ErrorCode::invalid_shape, std::string(name) + ": expected B + 1 offsets (at least the leading 0), got none");
  }
  std::vector<int64_t> values(static_cast<std::size_t>(offsets.size(0)));
  for (int64_t b = 0; b < offsets.size(0); ++b) {
    values[static_cast<std::size_t>(b)] = offsets.dtype() == DType::i32 ? int64_t{*offsets.at<std::int32_t>({b})}
                                                                        : *offsets.at<std::int64_t>({b});
  }
  const auto at = [&](int64_t b) { return std::string(name) + "[" + std::to_string(b) + "]"; };
  if (values[0] != 0) fail(ErrorCode::invalid_argument, at(0) + ": the first offset must be 0, got " + std::to_string(values[0]));
  for (int64_t b = 1; b < offsets.size(0); ++b) {
    const int64_t value = values[static_cast<std::size_t>(b)], previous = values[static_cast<std::size_t>(b - 1)];
    if (value < previous) {
      fail(ErrorCode::invalid_argument, at(b) + ": " + std::to_string(value) + " is less than " + at(b - 1) + " = " +
                                            std::to_string(previous) + " (offsets are non-decreasing)");
    }
    if (value > total) {
      fail(ErrorCode::invalid_argument, at(b) + ": " + std::to_string(value) + " is past the end of " + tensor + "'s " +
                                            std::to_string(total) + " packed rows");
    }
  }
  if (values.back() != total) {
    fail(ErrorCode::invalid_argument, at(offsets.size(0) - 1) + ": the last offset, " + std::to_string(values.back()) +
                                          ", must be the total, " + tensor + "'s " + std::to_string(total) +
                                          " packed rows (rows " + std::to_string(values.back()) + ".." +
                                          std::to_string(total - 1) + " belong to no sequence)");
  }
  return values;
}

// q, k, v in the packed layout: the checks of check_qkv, with messages in that layout. Returns the
// sizes but for batch, n and m.
Sizes check_packed_qkv(ConstTensorView q, ConstTensorView k, ConstTensorView v) {
  check_rank("q", q, 3, "[total_q, heads, d_k]");
  check_rank("k", k, 3, "[total_k, kv_heads, d_k]");
  check_rank("v", v, 3, "[total_k, kv_heads, d_v]");
  const std::string all = check_elements_and_views(q, k, v);
  Sizes s;
  s.q_heads = q.size(1);
  s.d_k = q.size(2);
  s.kv_heads = k.size(1);
  s.d_v = v.size(2);
  if (v.size(0) != k.size(0)) {
    fail(ErrorCode::invalid_shape, "v: " + std::to_string(v.size(0)) + " packed rows, but k has " + std::to_string(k.size(0)) + all);
  }
  check_heads_and_features(s, v.size(1), k.size(2), all);
  return s;
}

Problem make_packed_problem(ConstTensorView q, ConstTensorView k, ConstTensorView v, const PackedSequences& packed,
                            const AttentionOptions& options) {
  Problem p;
  p.sizes = check_packed_qkv(q, k, v);
  Sizes& s = p.sizes;
  s.batch = static_cast<int64_t>(packed.query_offsets.size()) - 1;
  p.packed = &packed.offsets;
  for (int64_t b = 0; b < s.batch; ++b) {
    s.n = std::max(s.n, p.query_count(b));
    s.m = std::max(s.m, p.key_count(b));
  }
  p.q = as_one_batch(q);
  p.k = as_one_batch(k);
  p.v = as_one_batch(v);
  if (!options.key_lengths.empty()) {
    fail(ErrorCode::invalid_argument, "key_lengths: a packed batch takes each sequence's keys from cu_seqlens_k; "
                                      "leave key_lengths empty");
  }
  resolve_options(p, options, q.dtype());
  check_alibi(options, s);
  check_sinks(options, s);
  resolve_mask(options, s, p);
  return p;
}

}  // namespace

void read_packed_sequences(const SequenceOffsets& offsets, ConstTensorView q, ConstTensorView k, PackedSequences& packed) {
  check_rank("q", q, 3, "[total_q, heads, d_k]");
  check_rank("k", k, 3, "[total_k, kv_heads, d_k]");
  packed.query_offsets = read_offsets("cu_seqlens_q", offsets.queries, "q", q.size(0));
  packed.key_offsets = read_offsets("cu_seqlens_k", offsets.keys, "k", k.size(0));
  if (packed.query_offsets.size() != packed.key_offsets.size()) {
    fail(ErrorCode::invalid_shape, "cu_seqlens_q, cu_seqlens_k: " + std::to_string(packed.query_offsets.size()) + " and " +
                                       std::to_string(packed.key_offsets.size()) +
                                       " offsets; both list B + 1 (one sequence per batch entry on each side)");
  }
  packed.offsets = {packed.query_offsets.data(), packed.key_offsets.data()};
}

Problem validate_varlen_forward(ConstTensorView q, ConstTensorView k, ConstTensorView v, const PackedSequences& packed,
                                TensorView out, const AttentionOptions& options, const ForwardExtras& extras,
                                ForwardOutputs& outputs) {
  Problem p = make_packed_problem(q, k, v, packed, options);
  const Sizes& s = p.sizes;
  check_same_dtype("out", out, q);
  check_output("out", out, {q.size(0), s.q_heads, s.d_v}, "[total_q, Hq, d_v]");
  std::vector<ByteSpan> spans = {span_of("out", out)};
  if (extras.lse) {
    if (extras.lse->dtype() != DType::f32) fail(ErrorCode::invalid_dtype, describe("lse", *extras.lse) + ": lse is always f32");
    check_output("lse", *extras.lse, {s.q_heads, q.size(0)}, "[Hq, total_q]");
    spans.push_back(span_of("lse", *extras.lse));
  }
  if (extras.probs) {
    if (!is_floating(extras.probs->dtype())) {
      fail(ErrorCode::invalid_dtype, describe("probs", *extras.probs) + ": probs takes a floating dtype");
    }
    check_output("probs", *extras.probs, {s.batch, s.q_heads, s.n, s.m},
                 "[B, Hq, max_n, max_m] (the longest sequence's lengths)");
    spans.push_back(span_of("probs", *extras.probs));
  }
  std::vector<ByteSpan> inputs = {span_of("q", q), span_of("k", k), span_of("v", v)};
  if (p.mask_kind != MaskKind::none) inputs.push_back(span_of("mask", p.mask));
  check_no_overlap(spans, inputs);
  std::optional<TensorView> lse;
  if (extras.lse) lse = lse_as_one_batch(*extras.lse);
  outputs = ForwardOutputs{as_one_batch(out), lse, without_strides_if_empty(extras.probs)};
  return p;
}

Problem validate_varlen_backward(ConstTensorView q, ConstTensorView k, ConstTensorView v, const PackedSequences& packed,
                                 const BackwardIO& io, const AttentionOptions& options, BackwardIO& batched_io) {
  Problem p = make_packed_problem(q, k, v, packed, options);
  const Sizes& s = p.sizes;
  const int64_t total_q = q.size(0), total_k = k.size(0);
  for (auto [name, view] : {std::pair{"out", io.out}, std::pair{"d_out", io.d_out}}) {
    check_same_dtype(name, view, q);
    check_shape(name, view, {total_q, s.q_heads, s.d_v}, "[total_q, Hq, d_v]");
    check_view_basics(name, view);
  }
  if (io.lse.dtype() != DType::f32) fail(ErrorCode::invalid_dtype, describe("lse", io.lse) + ": lse is always f32");
  check_shape("lse", io.lse, {s.q_heads, total_q}, "[Hq, total_q]");
  check_view_basics("lse", io.lse);
  check_same_dtype("dq", io.dq, q);
  check_same_dtype("dk", io.dk, q);
  check_same_dtype("dv", io.dv, q);
  check_output("dq", io.dq, {total_q, s.q_heads, s.d_k}, "(the shape of q)");
  check_output("dk", io.dk, {total_k, s.kv_heads, s.d_k}, "(the shape of k)");
  check_output("dv", io.dv, {total_k, s.kv_heads, s.d_v}, "(the shape of v)");
  check_sink_gradient(options, s, io.d_sinks);
  std::vector<ByteSpan> inputs = {span_of("q", q), span_of("k", k), span_of("v", v), span_of("out", io.out),
                                  span_of("d_out", io.d_out), span_of("lse", io.lse)};
  if (p.mask_kind != MaskKind::none) inputs.push_back(span_of("mask", p.mask));
  check_no_overlap(gradient_spans(io), inputs);
  batched_io = BackwardIO{as_one_batch(io.out), as_one_batch(io.d_out), lse_as_one_batch(io.lse),
                          as_one_batch(io.dq),  as_one_batch(io.dk),    as_one_batch(io.dv), io.d_sinks};
  return p;
}

}  // namespace attnkit::detail
