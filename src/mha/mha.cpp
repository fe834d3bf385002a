// The module's forward and backward: projections (mha/linear), RoPE (mha/rope), the masks
// (mha/masks) and attnkit::forward / attnkit::backward per head.
//
// Activations are float32 and token-major, [B, S, heads · d]: the heads of a token are adjacent,
// so the projections are plain matrix products and the attention kernels see each head through a
// strided [B, H, S, d] view, without a copy in either direction.
#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "attnkit/attention.hpp"
#include "attnkit/error.hpp"
#include "attnkit/kv_cache.hpp"
#include "attnkit/mha.hpp"
#include "mha/layout.hpp"
#include "mha/linear.hpp"
#include "mha/masks.hpp"
#include "mha/rope.hpp"

namespace attnkit {
namespace {

[[noreturn]] void fail(ErrorCode code, const std::string& message) { throw Error(code, message); }

// An input's batch, sequence length and width, and how to read it as [B, S, width].
struct InputShape {
  std::int64_t batch = 0, seq = 0, width = 0;
  bool unbatched = false;
};

InputShape input_shape(const char* name, ConstTensorView t, bool batch_first, std::int64_t width) {
  if (t.rank() != 2 && t.rank() != 3) {
    fail(ErrorCode::invalid_shape, std::string(name) + ": expected rank 3 " + (batch_first ? "[B, S, width]" : "[S, B, width]") +
                                       " or rank 2 [S, width], got " + t.shape_string());
  }
  if (!is_floating(t.dtype())) fail(ErrorCode::invalid_dtype, std::string(name) + ": " + std::string(dtype_name(t.dtype())) + " input; expected a floating dtype");
  InputShape s;
  s.unbatched = t.rank() == 2;
  s.batch = s.unbatched ? 1 : t.size(batch_first ? 0 : 1);
  s.seq = s.unbatched ? t.size(0) : t.size(batch_first ? 1 : 0);
  s.width = t.size(t.rank() - 1);
  if (s.width != width) {
    fail(ErrorCode::invalid_shape, std::string(name) + ": width " + std::to_string(s.width) + " in " + t.shape_string() +
                                       ", the module expects " + std::to_string(width));
  }
  return s;
}

// The input as float32 [B, S, width], contiguous (an unbatched [S, width] reads as [1, S, width]).
Tensor as_batch_major(ConstTensorView t, bool batch_first) {
  if (t.rank() == 3 && !batch_first) t = t.permuted({1, 0, 2});
  return Tensor::converted(t.unsqueezed_to(3), DType::f32);
}

// A [B, S, W] float32 result returned in the caller's layout (and dtype).
Tensor to_caller_layout(const Tensor& t, const InputShape& like, bool batch_first, DType dtype) {
  const std::int64_t s = t.shape()[1], w = t.shape()[2];
  if (like.unbatched) return Tensor::converted(ConstTensorView::contiguous(t.raw(), DType::f32, {s, w}), dtype);
  if (batch_first) return Tensor::converted(t.view(), dtype);
  return Tensor::converted(t.view().permuted({1, 0, 2}), dtype);
}

// [B, S, heads·d] token-major storage seen as [B, heads, S, d].
ConstTensorView heads_view(const Tensor& t, std::int64_t heads, std::int64_t d) {
  const std::int64_t b = t.shape()[0], s = t.shape()[1];
  return ConstTensorView(t.raw(), DType::f32, {b, heads, s, d}, {s * heads * d, d, heads * d, 1});
}
TensorView heads_view(Tensor& t, std::int64_t heads, std::int64_t d) {
  const std::int64_t b = t.shape()[0], s = t.shape()[1];
  return TensorView(t.raw(), DType::f32, {b, heads, s, d}, {s * heads * d, d, heads * d, 1});
}

// Parameters as float32 (bf16 weights are widened per call).
struct Weights {
  std::map<std::string, Tensor> wide;
  const float* get(const std::map<std::string, Tensor>& params, const std::string& name) {
    const Tensor& t = params.at(name);
    if (t.dtype() == DType::f32) return t.data<float>();
    auto [it, inserted] = wide.try_emplace(name);
    if (inserted) it->second = Tensor::converted(t.view(), DType::f32);
    return it->second.data<float>();
  }
};

// One input projection (which: 0 query, 1 key, 2 value) of a [B, S, in] input: [B, S, rows].
Tensor project(const std::map<std::string, Tensor>& params, const mha::Layout& layout, bool bias, int which,
               const Tensor& input, Weights& weights) {
  const mha::Layout::Projection p = layout.projection(which);
  const std::int64_t batch = input.shape()[0], seq = input.shape()[1];
  Tensor projected(DType::f32, {batch, seq, p.rows});
  const float* b = bias ? weights.get(params, "in_proj_bias") + p.bias_offset : nullptr;
  mha::linear(input.data<float>(), batch * seq, p.in, weights.get(params, p.weight) + p.first_row * p.in, p.rows, b,
              projected.data<float>());
  return projected;
}

// The output projection of the concatenated heads [B, S, H·d]: [B, S, E].
Tensor project_out(const std::map<std::string, Tensor>& params, const MultiHeadAttentionConfig& c,
                   const mha::Layout& layout, const Tensor& attention, Weights& weights) {
  const std::int64_t batch = attention.shape()[0], seq = attention.shape()[1];
  Tensor out(DType::f32, {batch, seq, c.embed_dim});
  mha::linear(attention.data<float>(), batch * seq, layout.q_width(), weights.get(params, "out_proj.weight"),
              c.embed_dim, c.bias ? weights.get(params, "out_proj.bias") : nullptr, out.data<float>());
  return out;
}

// RoPE positions first .. first + count − 1 must be int64 values: the last one is computed.
void check_positions(const char* name, std::int64_t first, std::int64_t count) {
  if (count > 0 && first > std::numeric_limits<std::int64_t>::max() - (count - 1)) {
    fail(ErrorCode::invalid_argument, std::string(name) + ": " + std::to_string(first) + " + " + std::to_string(count - 1) +
                                          " (the last of " + std::to_string(count) + " positions) overflows int64");
  }
}

AttentionOptions attention_options(const MultiHeadAttentionOptions& o, const std::optional<ConstTensorView>& mask) {
  AttentionOptions a;
  a.causal = o.causal;
  a.window = o.window;
  a.dropout_p = o.dropout_p;
  a.seed = o.seed;
  a.kernel = o.kernel;
  if (mask) a.mask = *mask;
  return a;
}

}  // namespace

MultiHeadAttentionOutput MultiHeadAttention::forward(ConstTensorView query, ConstTensorView key, ConstTensorView value,
                                                     const MultiHeadAttentionOptions& options,
                                                     MultiHeadAttentionContext* context) const {
  const MultiHeadAttentionConfig& c = config_;
  const mha::Layout layout(c);
  const InputShape qs = input_shape("query", query, c.batch_first, c.embed_dim);
  const InputShape ks = input_shape("key", key, c.batch_first, c.kdim);
  const InputShape vs = input_shape("value", value, c.batch_first, c.vdim);
  if (ks.unbatched != qs.unbatched || vs.unbatched != qs.unbatched || ks.batch != qs.batch || vs.batch != qs.batch ||
      vs.seq != ks.seq) {
    fail(ErrorCode::invalid_shape, "key, value: expected the batch of query and one sequence length for both; got query " +
                                       query.shape_string() + ", key " + key.shape_string() + ", value " + value.shape_string());
  }
  const std::int64_t batch = qs.batch, n = qs.seq, m = ks.seq, d = c.head_dim;

  // Projections, then RoPE, in float32 [B, S, heads·d].
  MultiHeadAttentionContext local;
  MultiHeadAttentionContext& ctx = context != nullptr ? *context : local;
  ctx.query = as_batch_major(query, c.batch_first);
  ctx.key = as_batch_major(key, c.batch_first);
  ctx.value = as_batch_major(value, c.batch_first);
  ctx.options = options;
  ctx.unbatched = qs.unbatched;
  Weights weights;
  ctx.q = project(parameters_, layout, c.bias, 0, ctx.query, weights);
  ctx.k = project(parameters_, layout, c.bias, 1, ctx.key, weights);
  ctx.v = project(parameters_, layout, c.bias, 2, ctx.value, weights);
  if (c.rope) {
    check_positions("query_position", options.query_position, n);
    check_positions("key_position", options.key_position, m);
    mha::apply_rope(ctx.q.data<float>(), batch, n, c.num_heads, d, options.query_position, *c.rope, false);
    mha::apply_rope(ctx.k.data<float>(), batch, m, c.num_kv_heads, d, options.key_position, *c.rope, false);
  }

  // Attention per head, straight into the concatenated [B, n, H·d] layout.
  Tensor mask_storage;
  const std::optional<ConstTensorView> mask = mha::kernel_mask(options, batch, c.num_heads, n, m, qs.unbatched, mask_storage);
  ctx.attention = Tensor(DType::f32, {batch, n, layout.q_width()});
  ctx.lse = Tensor(DType::f32, {batch, c.num_heads, n});
  MultiHeadAttentionOutput result;
  Tensor probs;
  ForwardExtras extras{ctx.lse.view(), std::nullopt};
  if (options.need_weights) {
    probs = Tensor(DType::f32, {batch, c.num_heads, n, m});
    extras.probs = probs.view();
  }
  attnkit::forward(heads_view(ctx.q, c.num_heads, d), heads_view(ctx.k, c.num_kv_heads, d),
                   heads_view(ctx.v, c.num_kv_heads, d), heads_view(ctx.attention, c.num_heads, d),
                   attention_options(options, mask), extras);

  result.out = to_caller_layout(project_out(parameters_, c, layout, ctx.attention, weights), qs, c.batch_first, query.dtype());

  if (options.need_weights) {
    if (options.average_attn_weights) {  // mean over heads, summed in head order
      Tensor mean(DType::f32, {batch, n, m});
      const std::int64_t plane = n * m;
      for (std::int64_t b = 0; b < batch; ++b)
        for (std::int64_t e = 0; e < plane; ++e) {
          double sum = 0;
          for (std::int64_t h = 0; h < c.num_heads; ++h) sum += probs.data<float>()[(b * c.num_heads + h) * plane + e];
          mean.data<float>()[b * plane + e] = static_cast<float>(sum / static_cast<double>(c.num_heads));
        }
      result.weights = qs.unbatched ? Tensor::converted(ConstTensorView::contiguous(mean.raw(), DType::f32, {n, m}), DType::f32)
                                    : std::move(mean);
    } else {
      result.weights = qs.unbatched ? Tensor::converted(ConstTensorView::contiguous(probs.raw(), DType::f32, {c.num_heads, n, m}), DType::f32)
                                    : std::move(probs);
    }
  }
  return result;
}

Tensor MultiHeadAttention::forward_cached(ConstTensorView x, KVCache& cache, std::span<const KVCache::SequenceId> sequences,
                                         const CachedForwardOptions& options) const {
  const MultiHeadAttentionConfig& c = config_;
  const mha::Layout layout(c);
  const InputShape xs = input_shape("x", x, c.batch_first, c.embed_dim);
  const std::int64_t batch = xs.batch, t = xs.seq, d = c.head_dim;
  if (static_cast<std::int64_t>(sequences.size()) != batch) {
    fail(ErrorCode::invalid_shape, "sequences: " + std::to_string(sequences.size()) + " listed, but x " + x.shape_string() +
                                       " holds " + std::to_string(batch) + (xs.unbatched ? " (unbatched)" : ""));
  }
  const KVCacheConfig& cc = cache.config();
  if (cc.num_kv_heads != c.num_kv_heads || cc.head_dim != d || cc.value_dim != d) {
    fail(ErrorCode::invalid_shape, "cache: " + std::to_string(cc.num_kv_heads) + " KV heads with head_dim " +
                                       std::to_string(cc.head_dim) + " and value_dim " + std::to_string(cc.value_dim) +
                                       ", but the module has " + std::to_string(c.num_kv_heads) + " of dimension " +
                                       std::to_string(d));
  }
  std::vector<std::int64_t> positions;  // of each sequence's first new token
  for (std::size_t b = 0; b < sequences.size(); ++b) {
    if (!cache.contains(sequences[b])) {
      fail(ErrorCode::invalid_argument, "sequences[" + std::to_string(b) + "]: sequence " + std::to_string(sequences[b]) +
                                            " is not in the cache (never added, or freed)");
    }
    positions.push_back(cache.length(sequences[b]));
  }

  const Tensor input = as_batch_major(x, c.batch_first);
  Weights weights;
  Tensor q = project(parameters_, layout, c.bias, 0, input, weights);
  Tensor k = project(parameters_, layout, c.bias, 1, input, weights);
  const Tensor v = project(parameters_, layout, c.bias, 2, input, weights);
  if (c.rope) {
    mha::apply_rope(q.data<float>(), batch, t, c.num_heads, d, positions, *c.rope, false);
    mha::apply_rope(k.data<float>(), batch, t, c.num_kv_heads, d, positions, *c.rope, false);
  }
  cache.append(sequences, heads_view(k, c.num_kv_heads, d), heads_view(v, c.num_kv_heads, d));

  Tensor attention(DType::f32, {batch, t, layout.q_width()});
  CachedAttentionOptions a;
  a.window = options.window;
  a.kernel = options.kernel;
  attnkit::attend(cache, sequences, heads_view(q, c.num_heads, d), heads_view(attention, c.num_heads, d), a);
  return to_caller_layout(project_out(parameters_, c, layout, attention, weights), xs, c.batch_first, x.dtype());
}

MultiHeadAttentionGradients MultiHeadAttention::backward(const MultiHeadAttentionContext& ctx, ConstTensorView d_out) const {
  const MultiHeadAttentionConfig& c = config_;
  const mha::Layout layout(c);
  if (ctx.query.rank() != 3 || ctx.q.rank() != 3 || ctx.attention.rank() != 3) {
    fail(ErrorCode::invalid_argument, "backward: the context was not filled by a forward call of this module");
  }
  const std::int64_t batch = ctx.query.shape()[0], n = ctx.query.shape()[1], m = ctx.key.shape()[1], d = c.head_dim;
  const bool unbatched = ctx.unbatched;
  const InputShape os = input_shape("d_out", d_out, c.batch_first, c.embed_dim);
  if (os.unbatched != unbatched || os.batch != batch || os.seq != n) {
    fail(ErrorCode::invalid_shape, "d_out: " + d_out.shape_string() + " does not match the forward's output (" +
                                       std::to_string(batch) + " sequences of " + std::to_string(n) + " queries)");
  }
  const Tensor dy = as_batch_major(d_out, c.batch_first);
  Weights weights;
  MultiHeadAttentionGradients g;
  auto zeros_like = [](const Tensor& t) { return Tensor(DType::f32, t.shape()); };
  for (const auto& [name, tensor] : parameters_) g.d_weights[name] = zeros_like(tensor);

  // Output projection: Y = A·W_oᵀ + b_o.
  Tensor d_attention(DType::f32, ctx.attention.shape());
  mha::linear_weight_gradient(dy.data<float>(), batch * n, c.embed_dim, ctx.attention.data<float>(), layout.q_width(),
                              g.d_weights["out_proj.weight"].data<float>(),
                              c.bias ? g.d_weights["out_proj.bias"].data<float>() : nullptr);
  mha::linear_input_gradient(dy.data<float>(), batch * n, c.embed_dim, weights.get(parameters_, "out_proj.weight"),
                             layout.q_width(), d_attention.data<float>());

  // Attention.
  Tensor mask_storage;
  const std::optional<ConstTensorView> mask = mha::kernel_mask(ctx.options, batch, c.num_heads, n, m, unbatched, mask_storage);
  Tensor dq = zeros_like(ctx.q), dk = zeros_like(ctx.k), dv = zeros_like(ctx.v);
  attnkit::backward(heads_view(ctx.q, c.num_heads, d), heads_view(ctx.k, c.num_kv_heads, d),
                    heads_view(ctx.v, c.num_kv_heads, d), heads_view(ctx.attention, c.num_heads, d),
                    heads_view(d_attention, c.num_heads, d), ctx.lse.view(), heads_view(dq, c.num_heads, d),
                    heads_view(dk, c.num_kv_heads, d), heads_view(dv, c.num_kv_heads, d),
                    attention_options(ctx.options, mask));
  if (c.rope) {  // the rotation's gradient is the inverse rotation
    mha::apply_rope(dq.data<float>(), batch, n, c.num_heads, d, ctx.options.query_position, *c.rope, true);
    mha::apply_rope(dk.data<float>(), batch, m, c.num_kv_heads, d, ctx.options.key_position, *c.rope, true);
  }

  // Input projections.
  const Tensor* grads[3] = {&dq, &dk, &dv};
  const Tensor* inputs[3] = {&ctx.query, &ctx.key, &ctx.value};
  Tensor* d_inputs[3] = {&g.d_query, &g.d_key, &g.d_value};
  for (int which = 0; which < 3; ++which) {
    const mha::Layout::Projection p = layout.projection(which);
    const std::int64_t rows = batch * (which == 0 ? n : m);
    float* d_weight = g.d_weights[p.weight].data<float>() + p.first_row * p.in;
    float* d_bias = c.bias ? g.d_weights["in_proj_bias"].data<float>() + p.bias_offset : nullptr;
    mha::linear_weight_gradient(grads[which]->data<float>(), rows, p.rows, inputs[which]->data<float>(), p.in, d_weight, d_bias);
    Tensor d_input(DType::f32, inputs[which]->shape());
    mha::linear_input_gradient(grads[which]->data<float>(), rows, p.rows, weights.get(parameters_, p.weight) + p.first_row * p.in,
                               p.in, d_input.data<float>());
    InputShape like;
    like.unbatched = unbatched;
    *d_inputs[which] = to_caller_layout(d_input, like, c.batch_first, DType::f32);
  }
  return g;
}

}  // namespace attnkit
