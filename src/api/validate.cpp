// Argument checking: shapes, dtypes, options, pointers, overlap, size overflow.
#include "api/validate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "attnkit/error.hpp"
#include "attnkit/quantized.hpp"
#include "core/option_checks.hpp"

namespace attnkit::detail {
namespace {

using std::int64_t;

std::string stride_string(ConstTensorView view) {
  std::string text = "[";
  for (int d = 0; d < view.rank(); ++d) text += (d ? ", " : "") + std::to_string(view.stride(d));
  return text + "]";
}

std::string describe(const char* name, ConstTensorView view) {
  return std::string(name) + " " + view.shape_string() + " " + std::string(dtype_name(view.dtype()));
}

[[noreturn]] void fail(ErrorCode code, const std::string& message) { throw Error(code, message); }

// ---- one view on its own ----

// Sizes are non-negative, the element count and the byte extent fit in 64 bits, and data is non-null
// whenever there is an element to read or write. The count's product leaves out sizes of 0 but must
// fit all the same: kernels multiply sizes (batch × heads, ...) whether or not another size is 0.
void check_view_basics(const char* name, ConstTensorView view) {
  int64_t product = 1;  // of the non-zero sizes
  bool empty = false;
  int64_t max_offset = 0;  // largest |element offset| reachable, to bound the byte extent
  for (int d = 0; d < view.rank(); ++d) {
    const int64_t size = view.size(d);
    if (size < 0) fail(ErrorCode::invalid_shape, describe(name, view) + ": size " + std::to_string(d) + " is negative");
    if (size == 0) {
      empty = true;
    } else if (__builtin_mul_overflow(product, size, &product)) {
      fail(ErrorCode::size_overflow, describe(name, view) + ": the product of its sizes overflows 64 bits");
    }
  }
  if (empty) return;
  const int64_t count = product;
  const auto element_bytes = static_cast<int64_t>(dtype_size(view.dtype()));
  for (int d = 0; d < view.rank(); ++d) {
    // Every stride in bytes fits too, even that of a size-1 dimension, which is never stepped: kernels
    // compute a row's step in bytes up front.
    const int64_t stride = view.stride(d);
    int64_t reach = 0, stride_bytes = 0;
    if (stride == std::numeric_limits<int64_t>::min() ||
        __builtin_mul_overflow(stride < 0 ? -stride : stride, element_bytes, &stride_bytes) ||
        __builtin_mul_overflow(view.size(d) - 1, stride < 0 ? -stride : stride, &reach) ||
        __builtin_add_overflow(max_offset, reach, &max_offset)) {
      fail(ErrorCode::size_overflow, describe(name, view) + ": the strides reach past 64-bit byte offsets");
    }
  }
  int64_t elements = 0, bytes = 0;  // the extent: max_offset + 1 elements, which may itself overflow
  if (__builtin_add_overflow(max_offset, 1, &elements) || __builtin_mul_overflow(elements, element_bytes, &bytes)) {
    fail(ErrorCode::size_overflow, describe(name, view) + ": the byte extent overflows 64 bits");
  }
  if (view.data() == nullptr) {
    fail(ErrorCode::null_pointer, describe(name, view) + ": data is null but the view has " + std::to_string(count) +
                                      " elements");
  }
}

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

std::optional<TensorView> without_strides_if_empty(const std::optional<TensorView>& view) {
  if (!view) return view;
  return without_strides_if_empty(*view);
}

void check_rank(const char* name, ConstTensorView view, int rank, const char* layout) {
  if (view.rank() != rank) {
    fail(ErrorCode::invalid_shape, std::string(name) + ": expected rank " + std::to_string(rank) + " " + layout +
                                       ", got rank " + std::to_string(view.rank()) + " " + view.shape_string());
  }
}

void check_same_dtype(const char* name, ConstTensorView view, ConstTensorView q) {
  if (view.dtype() != q.dtype()) {
    fail(ErrorCode::invalid_dtype, std::string(name) + ": dtype " + std::string(dtype_name(view.dtype())) +
                                       " does not match q's dtype " + std::string(dtype_name(q.dtype())) +
                                       " (q, k, v, outputs and gradients share one floating dtype)");
  }
}

// An output view must not write one element twice. The test is conservative, like the overlap test
// between views: taken by increasing |stride|, each dimension of size > 1 must step past everything
// the smaller ones reach, as in every permuted, padded or reversed layout (so a zero stride fails, and
// so do interleaved layouts that happen to be disjoint). Called after check_view_basics, so the
// reaches fit in 64 bits.
void check_writable(const char* name, ConstTensorView view) {
  struct Step {
    int dim;
    int64_t stride, size;  // |stride|
  };
  for (int d = 0; d < view.rank(); ++d) {
    if (view.size(d) == 0) return;  // no element is written
  }
  std::vector<Step> steps;
  for (int d = 0; d < view.rank(); ++d) {
    if (view.size(d) == 1) continue;
    if (view.stride(d) == 0) {
      fail(ErrorCode::overlap, describe(name, view) + ": dimension " + std::to_string(d) +
                                   " has stride 0, so its elements would overwrite each other");
    }
    steps.push_back({d, view.stride(d) < 0 ? -view.stride(d) : view.stride(d), view.size(d)});
  }
  std::sort(steps.begin(), steps.end(), [](const Step& a, const Step& b) { return a.stride < b.stride; });
  int64_t reach = 0;  // of the dimensions taken so far, in elements
  for (const Step& step : steps) {
    if (step.stride <= reach) {
      fail(ErrorCode::overlap, describe(name, view) + ": dimension " + std::to_string(step.dim) + " (stride " +
                                   std::to_string(view.stride(step.dim)) +
                                   ") steps onto elements that smaller strides already reach, so elements would "
                                   "overwrite each other (strides " + stride_string(view) + ")");
    }
    reach += (step.size - 1) * step.stride;
  }
}

void check_shape(const char* name, ConstTensorView view, const std::vector<int64_t>& expected, const std::string& why) {
  bool same = static_cast<int>(expected.size()) == view.rank();
  for (int d = 0; same && d < view.rank(); ++d) same = view.size(d) == expected[static_cast<std::size_t>(d)];
  if (!same) {
    std::string want = "[";
    for (std::size_t d = 0; d < expected.size(); ++d) want += (d ? ", " : "") + std::to_string(expected[d]);
    fail(ErrorCode::invalid_shape, std::string(name) + ": expected shape " + want + "] " + why + ", got " +
                                       view.shape_string());
  }
}

// ---- overlap ----

struct ByteSpan {
  const char* name;
  std::uintptr_t begin = 0, end = 0;  // [begin, end); empty when begin == end
};

ByteSpan span_of(const char* name, ConstTensorView view) {
  ByteSpan span{name};
  if (view.numel() == 0) return span;
  int64_t low = 0, high = 0;
  for (int d = 0; d < view.rank(); ++d) {
    const int64_t reach = (view.size(d) - 1) * view.stride(d);
    (reach < 0 ? low : high) += reach;
  }
  const auto elem = static_cast<int64_t>(dtype_size(view.dtype()));
  const auto base = reinterpret_cast<std::uintptr_t>(view.data());
  span.begin = base + static_cast<std::uintptr_t>(low * elem);
  span.end = base + static_cast<std::uintptr_t>((high + 1) * elem);
  // A quantized KV cache's last row record reaches past its last code: its scales follow.
  if (is_quantized(view.dtype())) span.end += static_cast<std::uintptr_t>(quantized_row_bytes(view.dtype(), view.size(3)) - view.size(3));
  return span;
}

// Outputs may not share memory with inputs or with each other. Spans are the address ranges the views
// can reach, a conservative test: interleaved but disjoint layouts are rejected too (documented).
void check_no_overlap(const std::vector<ByteSpan>& outputs, const std::vector<ByteSpan>& inputs) {
  auto intersects = [](const ByteSpan& a, const ByteSpan& b) {
    return a.begin < a.end && b.begin < b.end && a.begin < b.end && b.begin < a.end;
  };
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    for (const ByteSpan& in : inputs) {
      if (intersects(outputs[i], in)) {
        fail(ErrorCode::overlap, std::string(outputs[i].name) + ": its memory overlaps input " + in.name +
                                     "; outputs must not alias inputs");
      }
    }
    for (std::size_t j = i + 1; j < outputs.size(); ++j) {
      if (intersects(outputs[i], outputs[j])) {
        fail(ErrorCode::overlap, std::string(outputs[i].name) + ": its memory overlaps output " + outputs[j].name);
      }
    }
  }
}

// ---- q, k, v ----

// One floating dtype, and views whose sizes and strides are sound. Returns the three shapes, as
// error messages end with them.
std::string check_elements_and_views(ConstTensorView q, ConstTensorView k, ConstTensorView v) {
  if (!is_floating(q.dtype())) {
    fail(ErrorCode::invalid_dtype, describe("q", q) + ": attention takes f64, f32, f16 or bf16");
  }
  check_same_dtype("k", k, q);
  check_same_dtype("v", v, q);
  check_view_basics("q", q);
  check_view_basics("k", k);
  check_view_basics("v", v);
  return " (" + describe("q", q) + ", " + describe("k", k) + ", " + describe("v", v) + ")";
}

// What every layout shares: v has k's heads, the query heads are a multiple of them, k has q's
// features. s holds q's heads and features and k's heads.
void check_heads_and_features(const Sizes& s, int64_t v_heads, int64_t k_features, const std::string& all) {
  if (v_heads != s.kv_heads) {
    fail(ErrorCode::invalid_shape, "v: " + std::to_string(v_heads) + " heads, but k has " + std::to_string(s.kv_heads) + all);
  }
  if (s.kv_heads == 0 ? s.q_heads != 0 : s.q_heads % s.kv_heads != 0) {
    fail(ErrorCode::invalid_shape, "q, k: query heads " + std::to_string(s.q_heads) +
                                       " must be a multiple of key/value heads " + std::to_string(s.kv_heads) +
                                       " (GQA/MQA)" + all);
  }
  if (k_features != s.d_k) {
    fail(ErrorCode::invalid_shape, "k: key dimension " + std::to_string(k_features) + " does not match q's " +
                                       std::to_string(s.d_k) + all);
  }
}

Sizes check_qkv(ConstTensorView q, ConstTensorView k, ConstTensorView v) {
  check_rank("q", q, 4, "[batch, heads, n, d_k]");
  check_rank("k", k, 4, "[batch, kv_heads, m, d_k]");
  check_rank("v", v, 4, "[batch, kv_heads, m, d_v]");
  const std::string all = check_elements_and_views(q, k, v);
  Sizes s;
  s.batch = q.size(0);
  s.q_heads = q.size(1);
  s.n = q.size(2);
  s.d_k = q.size(3);
  s.kv_heads = k.size(1);
  s.m = k.size(2);
  s.d_v = v.size(3);
  if (k.size(0) != s.batch || v.size(0) != s.batch) {
    fail(ErrorCode::invalid_shape, "k, v: batch sizes " + std::to_string(k.size(0)) + " and " +
                                       std::to_string(v.size(0)) + " must equal q's batch size " +
                                       std::to_string(s.batch) + all);
  }
  check_heads_and_features(s, v.size(1), k.size(3), all);
  if (v.size(2) != s.m) {
    fail(ErrorCode::invalid_shape, "v: " + std::to_string(v.size(2)) + " keys, but k has " + std::to_string(s.m) + all);
  }
  // Hkv = 0 (and so Hq = 0) stays 0: the kernels return before using group() when there are no heads,
  // and a stand-in of 1 made the fast backward read and write a KV head that does not exist.
  return s;
}

// ---- options ----

// The options every kind of call shares, checked and resolved into the problem once: the kernel
// (never automatic from here on), the scale, the scalar options and float32's range for the fast
// kernel. The caller has set p.sizes.
void resolve_options(Problem& p, const AttentionOptions& options, DType dtype) {
  const double scale = resolve_scale(options, p.sizes);
  check_scalar_options(options, p.sizes);
  p.kernel = resolve_kernel(options.kernel, dtype);
  if (p.kernel == Kernel::fast) {
    p.target = active_target();
    check_float32_range(options, scale, dtype, " (use Kernel::reference or f64 inputs)");
  }
  p.take_options(options, scale);
}

void check_key_lengths(const AttentionOptions& o, const Sizes& s) {
  if (o.key_lengths.empty()) return;
  if (static_cast<int64_t>(o.key_lengths.size()) != s.batch) {
    fail(ErrorCode::invalid_shape, "key_lengths: expected one length per batch entry (" + std::to_string(s.batch) +
                                       "), got " + std::to_string(o.key_lengths.size()));
  }
  for (std::size_t b = 0; b < o.key_lengths.size(); ++b) {
    if (o.key_lengths[b] < 0 || o.key_lengths[b] > s.m) {
      fail(ErrorCode::invalid_argument, "key_lengths[" + std::to_string(b) + "]: " +
                                            std::to_string(o.key_lengths[b]) + " is outside 0.." + std::to_string(s.m) +
                                            " (m = number of keys)");
    }
  }
}

void check_alibi(const AttentionOptions& o, const Sizes& s) {
  if (o.alibi_slopes.empty()) return;
  if (static_cast<int64_t>(o.alibi_slopes.size()) != s.q_heads) {
    fail(ErrorCode::invalid_shape, "alibi_slopes: expected one slope per query head (" + std::to_string(s.q_heads) +
                                       "), got " + std::to_string(o.alibi_slopes.size()));
  }
  for (std::size_t h = 0; h < o.alibi_slopes.size(); ++h) {
    if (!std::isfinite(o.alibi_slopes[h])) {
      fail(ErrorCode::invalid_argument, "alibi_slopes[" + std::to_string(h) + "]: must be finite, got " +
                                            number_text(o.alibi_slopes[h]));
    }
  }
}

// The mask broadcasts to [B, Hq, n, m]: rank 2 [n|1, m|1] or rank 4 [B|1, Hq|1, n|1, m|1]. The result is
// a rank-4 view whose broadcast dimensions have stride 0, so kernels index it like a full tensor.
void resolve_mask(const AttentionOptions& o, const Sizes& s, Problem& p) {
  if (!o.mask) return;
  const ConstTensorView mask = *o.mask;
  if (mask.rank() != 2 && mask.rank() != 4) {
    fail(ErrorCode::invalid_shape, "mask: expected rank 2 [n, m] or rank 4 [B|1, Hq|1, n, m], got rank " +
                                       std::to_string(mask.rank()) + " " + mask.shape_string());
  }
  if (mask.dtype() == DType::boolean) {
    p.mask_kind = MaskKind::keep;
  } else if (is_floating(mask.dtype())) {
    p.mask_kind = MaskKind::additive;
  } else {
    fail(ErrorCode::invalid_dtype, describe("mask", mask) + ": a mask is bool (true = keep) or floating (additive)");
  }
  check_view_basics("mask", mask);
  const ConstTensorView full = mask.unsqueezed_to(4);
  const int64_t target[4] = {s.batch, s.q_heads, s.n, s.m};
  int64_t strides[4];
  for (int d = 0; d < 4; ++d) {
    if (full.size(d) != target[d] && full.size(d) != 1) {
      fail(ErrorCode::invalid_shape, "mask: shape " + mask.shape_string() + " does not broadcast to [B, Hq, n, m] = [" +
                                         std::to_string(s.batch) + ", " + std::to_string(s.q_heads) + ", " +
                                         std::to_string(s.n) + ", " + std::to_string(s.m) +
                                         "] (each dimension must match or be 1)");
    }
    strides[d] = full.size(d) == 1 ? 0 : full.stride(d);
  }
  p.mask = without_strides_if_empty(ConstTensorView(full.data(), full.dtype(), target, strides, 4));
}

Problem make_problem(ConstTensorView q, ConstTensorView k, ConstTensorView v, const AttentionOptions& options) {
  Problem p;
  p.sizes = check_qkv(q, k, v);
  p.q = without_strides_if_empty(q);
  p.k = without_strides_if_empty(k);
  p.v = without_strides_if_empty(v);
  resolve_options(p, options, q.dtype());
  check_key_lengths(options, p.sizes);
  check_alibi(options, p.sizes);
  resolve_mask(options, p.sizes, p);
  return p;
}

std::vector<ByteSpan> input_spans(const Problem& p) {
  std::vector<ByteSpan> spans = {span_of("q", p.q), span_of("k", p.k), span_of("v", p.v)};
  if (p.mask_kind != MaskKind::none) spans.push_back(span_of("mask", p.mask));
  return spans;
}

void check_output(const char* name, ConstTensorView view, const std::vector<int64_t>& shape, const std::string& why) {
  check_shape(name, view, shape, why);
  check_view_basics(name, view);
  check_writable(name, view);
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

  std::vector<ByteSpan> inputs = input_spans(p);
  inputs.push_back(span_of("out", io.out));
  inputs.push_back(span_of("d_out", io.d_out));
  inputs.push_back(span_of("lse", io.lse));
  check_no_overlap({span_of("dq", io.dq), span_of("dk", io.dk), span_of("dv", io.dv)}, inputs);
  return p;
}

// ---- packed variable-length batches ----

namespace {

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
  std::vector<ByteSpan> inputs = {span_of("q", q), span_of("k", k), span_of("v", v), span_of("out", io.out),
                                  span_of("d_out", io.d_out), span_of("lse", io.lse)};
  if (p.mask_kind != MaskKind::none) inputs.push_back(span_of("mask", p.mask));
  check_no_overlap({span_of("dq", io.dq), span_of("dk", io.dk), span_of("dv", io.dv)}, inputs);
  batched_io = BackwardIO{as_one_batch(io.out), as_one_batch(io.d_out), lse_as_one_batch(io.lse),
                          as_one_batch(io.dq),  as_one_batch(io.dk),    as_one_batch(io.dv)};
  return p;
}

}  // namespace attnkit::detail
