// The checks shared by every kind of call (argument_checks.hpp).
#include "api/argument_checks.hpp"

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

using std::int64_t;

namespace {

std::string stride_string(ConstTensorView view) {
  std::string text = "[";
  for (int d = 0; d < view.rank(); ++d) text += (d ? ", " : "") + std::to_string(view.stride(d));
  return text + "]";
}

}  // namespace

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

void check_output(const char* name, ConstTensorView view, const std::vector<int64_t>& shape, const std::string& why) {
  check_shape(name, view, shape, why);
  check_view_basics(name, view);
  check_writable(name, view);
}

// ---- overlap ----

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

namespace {

// `values` (named `name`): empty, or one finite `each` per query head.
void check_per_query_head(const char* name, std::span<const float> values, const char* each, const Sizes& s) {
  if (values.empty()) return;
  if (static_cast<int64_t>(values.size()) != s.q_heads) {
    fail(ErrorCode::invalid_shape, std::string(name) + ": expected one " + each + " per query head (" +
                                       std::to_string(s.q_heads) + "), got " + std::to_string(values.size()));
  }
  for (std::size_t h = 0; h < values.size(); ++h) {
    if (!std::isfinite(values[h])) {
      fail(ErrorCode::invalid_argument,
           std::string(name) + "[" + std::to_string(h) + "]: must be finite, got " + number_text(values[h]));
    }
  }
}

}  // namespace

void check_alibi(const AttentionOptions& o, const Sizes& s) { check_per_query_head("alibi_slopes", o.alibi_slopes, "slope", s); }

void check_sinks(const AttentionOptions& o, const Sizes& s) { check_per_query_head("sinks", o.sinks, "logit", s); }

std::vector<ByteSpan> gradient_spans(const BackwardIO& io) {
  std::vector<ByteSpan> spans = {span_of("dq", io.dq), span_of("dk", io.dk), span_of("dv", io.dv)};
  if (io.d_sinks) spans.push_back(span_of("d_sinks", *io.d_sinks));
  return spans;
}

void check_sink_gradient(const AttentionOptions& o, const Sizes& s, const std::optional<TensorView>& d_sinks) {
  if (!d_sinks) return;
  if (o.sinks.empty()) fail(ErrorCode::invalid_argument, "d_sinks: given without options.sinks, whose gradient it holds");
  if (d_sinks->dtype() != DType::f32) fail(ErrorCode::invalid_dtype, describe("d_sinks", *d_sinks) + ": d_sinks is f32, as sinks are");
  check_output("d_sinks", *d_sinks, {s.q_heads}, "[Hq]");
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

}  // namespace attnkit::detail
