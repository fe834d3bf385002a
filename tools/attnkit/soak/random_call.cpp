#include "soak/random_call.hpp"

#include <algorithm>
#include <cmath>
#include <string>

namespace attnkit::cli::soak {

namespace {

// A size that is sometimes 0 (empty sizes are valid and must stay so).
std::int64_t size_or_empty(Random& random, std::int64_t lo, std::int64_t hi) {
  return random.chance(1.0 / 40) ? 0 : random.integer(lo, hi);
}

std::string number(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", x);
  return text;
}

}  // namespace

std::string describe(const Shape& s) {
  return "B=" + std::to_string(s.batch) + " Hq=" + std::to_string(s.q_heads) + " Hkv=" + std::to_string(s.kv_heads) +
         " n=" + std::to_string(s.n) + " m=" + std::to_string(s.m) + " d_k=" + std::to_string(s.d_k) +
         " d_v=" + std::to_string(s.d_v);
}

double call_scale(const Shape& s, const AttentionOptions& o) {
  return o.scale.value_or(s.d_k > 0 ? 1.0 / std::sqrt(static_cast<double>(s.d_k)) : 1.0);
}

double logit_magnitude(const Shape& s, const Input& q, const Input& k, const AttentionOptions& o,
                       const std::optional<Tensor>& mask) {
  const double scale = call_scale(s, o);
  double logits = o.softcap > 0 ? std::min(o.softcap, scale * q.max_row_norm * k.max_row_norm) : scale * q.max_row_norm * k.max_row_norm;
  double slope = 0.0;
  for (float x : o.alibi_slopes) slope = std::max(slope, std::abs(static_cast<double>(x)));
  logits += slope * static_cast<double>(s.n + s.m);  // |i' − j| < n + m
  if (mask && mask->dtype() == DType::f32) {
    double largest = 0.0;
    for (std::int64_t i = 0; i < mask->numel(); ++i) {
      const double x = mask->data<float>()[i];
      if (std::isfinite(x)) largest = std::max(largest, std::abs(x));
    }
    logits += largest;
  }
  return logits;
}

Shape random_shape(Random& random, bool decode_allowed) {
  Shape s;
  s.batch = size_or_empty(random, 1, 2);
  s.kv_heads = random.integer(1, 3);
  s.q_heads = s.kv_heads * random.integer(1, 3);
  const bool decode = decode_allowed && random.chance(0.2);
  s.n = decode ? random.integer(1, 16) : size_or_empty(random, 1, 100);
  s.m = decode ? random.integer(900, 2600) : size_or_empty(random, 1, 300);
  s.d_k = size_or_empty(random, 1, 80);
  s.d_v = random.chance(0.5) ? std::max<std::int64_t>(s.d_k, 1) : random.integer(1, 80);
  return s;
}

Input random_input(Random& random, DType dtype, std::int64_t batch, std::int64_t heads, std::int64_t length,
                   std::int64_t dim, bool sequence_major) {
  Tensor values(DType::f64, sequence_major ? std::vector<std::int64_t>{batch, length, heads, dim}
                                           : std::vector<std::int64_t>{batch, heads, length, dim});
  double* p = values.data<double>();
  for (std::int64_t i = 0; i < values.numel(); ++i) p[i] = random.normal();
  Input input;
  input.storage = dtype == DType::f64 ? std::move(values) : Tensor::converted(values.view(), dtype);
  input.view = sequence_major ? ConstTensorView(input.storage.view()).permuted({0, 2, 1, 3}) : ConstTensorView(input.storage.view());
  input.exact = Tensor::converted(input.view, DType::f64);
  const double* e = input.exact.data<double>();
  for (std::int64_t i = 0; i < input.exact.numel(); ++i) input.max_abs = std::max(input.max_abs, std::abs(e[i]));
  for (std::int64_t row = 0; dim > 0 && row < input.exact.numel() / dim; ++row) {
    double squares = 0.0;
    for (std::int64_t c = 0; c < dim; ++c) squares += e[row * dim + c] * e[row * dim + c];
    input.max_row_norm = std::max(input.max_row_norm, std::sqrt(squares));
  }
  return input;
}

void random_options(Random& random, const Shape& s, bool dropout_allowed, RandomOptions& out) {
  AttentionOptions& o = out.options;
  std::string& text = out.text;
  if (random.chance(0.5)) {
    o.causal = random.chance(0.5) ? Causal::top_left : Causal::bottom_right;
    text += o.causal == Causal::top_left ? " causal=top_left" : " causal=bottom_right";
  }
  if (random.chance(0.25)) {
    o.window = {random.integer(-1, 40), random.integer(-1, 10)};
    text += " window=(" + std::to_string(o.window.left) + "," + std::to_string(o.window.right) + ")";
  }
  if (random.chance(0.3)) {
    const bool keep = random.chance(0.5);
    const bool per_head = random.chance(0.5);  // [1, Hq, n, m], else [n, m]
    std::vector<std::int64_t> shape = per_head ? std::vector<std::int64_t>{1, s.q_heads, s.n, s.m} : std::vector<std::int64_t>{s.n, s.m};
    Tensor mask(keep ? DType::boolean : DType::f32, shape);
    for (std::int64_t i = 0; i < mask.numel(); ++i) {
      if (keep) {
        mask.data<bool>()[i] = random.chance(0.8);
      } else {
        // Mostly small biases, sometimes −inf (masked outright).
        mask.data<float>()[i] = random.chance(0.1) ? -INFINITY : static_cast<float>(random.normal());
      }
    }
    out.mask = std::move(mask);
    o.mask = out.mask->view();
    text += std::string(" mask=") + (keep ? "bool" : "additive") + (per_head ? "[1,Hq,n,m]" : "[n,m]");
  }
  if (random.chance(0.2)) {
    for (std::int64_t b = 0; b < s.batch; ++b) out.key_lengths.push_back(random.integer(0, s.m));
    o.key_lengths = out.key_lengths;
    text += " key_lengths";
  }
  if (random.chance(0.2)) {
    for (std::int64_t h = 0; h < s.q_heads; ++h) out.alibi_slopes.push_back(static_cast<float>(random.uniform(0.0, 1.0)));
    o.alibi_slopes = out.alibi_slopes;
    text += " alibi";
  }
  if (random.chance(0.2)) {
    o.softcap = random.uniform(5.0, 50.0);
    text += " softcap=" + number(o.softcap);
  }
  if (random.chance(0.2)) {
    o.scale = random.uniform(0.05, 1.0);
    text += " scale=" + number(*o.scale);
  }
  if (dropout_allowed && random.chance(0.15)) {
    o.dropout_p = random.uniform(0.0, 0.5);
    o.seed = random.bits();
    text += " dropout=" + number(o.dropout_p);
  }
}

}  // namespace attnkit::cli::soak
