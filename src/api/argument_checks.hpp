// The argument checks that every kind of call shares (validate.cpp, validate_varlen.cpp): one view on
// its own, overlap between views, q, k and v, and the options. Each failure throws an attnkit::Error
// whose message names the argument, its shape and what was expected.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attnkit/error.hpp"
#include "core/problem.hpp"

namespace attnkit::detail {

// "name [shape] dtype", as messages name a view.
std::string describe(const char* name, ConstTensorView view);
[[noreturn]] void fail(ErrorCode code, const std::string& message);

// ---- one view on its own ----

// Sizes are non-negative, the element count and byte extent fit in 64 bits, and data is non-null
// when there is an element.
void check_view_basics(const char* name, ConstTensorView view);
// The view has this rank; `layout` names its dimensions in the message.
void check_rank(const char* name, ConstTensorView view, int rank, const char* layout);
// The view has q's dtype.
void check_same_dtype(const char* name, ConstTensorView view, ConstTensorView q);
// No two elements of an output view share memory (a conservative test, stride by stride).
void check_writable(const char* name, ConstTensorView view);
// The view has exactly the shape `expected`; `why` says what the shape is in the message.
void check_shape(const char* name, ConstTensorView view, const std::vector<std::int64_t>& expected, const std::string& why);
// An output view: check_shape, check_view_basics and check_writable.
void check_output(const char* name, ConstTensorView view, const std::vector<std::int64_t>& shape, const std::string& why);

// An empty view reaches no memory, so its strides are never checked; kernels may still form the
// addresses of its rows (of zero width), so what they receive has strides of 0 and stays at its base.
template <class View>
View without_strides_if_empty(const View& view) {
  bool empty = false;
  for (int d = 0; d < view.rank(); ++d) empty = empty || view.size(d) == 0;
  if (!empty) return view;
  const std::int64_t zero_strides[kMaxViewRank] = {};
  return View(view.data(), view.dtype(), view.sizes().data(), zero_strides, view.rank());
}
std::optional<TensorView> without_strides_if_empty(const std::optional<TensorView>& view);

// ---- overlap ----

// The address range a view can reach, named for messages.
struct ByteSpan {
  const char* name;
  std::uintptr_t begin = 0, end = 0;  // [begin, end); empty when begin == end
};
ByteSpan span_of(const char* name, ConstTensorView view);
// A backward call's outputs: dq, dk, dv and d_sinks when asked for.
std::vector<ByteSpan> gradient_spans(const BackwardIO& io);
// No output span meets an input span or another output span.
void check_no_overlap(const std::vector<ByteSpan>& outputs, const std::vector<ByteSpan>& inputs);

// ---- q, k, v ----

// q has a floating dtype that k and v share, and all three views are sound; returns " (q ..., k ...,
// v ...)", the shapes that error messages end with.
std::string check_elements_and_views(ConstTensorView q, ConstTensorView k, ConstTensorView v);
// v has k's heads, q's heads are a multiple of them, and k has q's features (s holds q's heads and
// features and k's heads); `all` ends each message.
void check_heads_and_features(const Sizes& s, std::int64_t v_heads, std::int64_t k_features, const std::string& all);
// q, k, v in the batched layout [B, H, n|m, d]; returns their sizes.
Sizes check_qkv(ConstTensorView q, ConstTensorView k, ConstTensorView v);

// ---- options ----

// The options every kind of call shares, checked and resolved into p (whose sizes are set): the
// kernel, the scale, the scalar options and, for the fast kernel, float32's range.
void resolve_options(Problem& p, const AttentionOptions& options, DType dtype);
// key_lengths holds one length in 0..m per batch entry, or nothing.
void check_key_lengths(const AttentionOptions& o, const Sizes& s);
// alibi_slopes holds one finite slope per query head, or nothing.
void check_alibi(const AttentionOptions& o, const Sizes& s);
// One finite logit per query head, or none.
void check_sinks(const AttentionOptions& o, const Sizes& s);
// d_sinks, when given: f32 [Hq], and only with sinks.
void check_sink_gradient(const AttentionOptions& o, const Sizes& s, const std::optional<TensorView>& d_sinks);
// The mask, if any, broadcasts to [B, Hq, n, m]; sets p's mask view and kind.
void resolve_mask(const AttentionOptions& o, const Sizes& s, Problem& p);

}  // namespace attnkit::detail
