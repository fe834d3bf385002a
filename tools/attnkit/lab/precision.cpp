// The precision experiment: the same inputs through every kernel and dtype, each output compared
// with a long double evaluation of the formula.
#include "lab/precision.hpp"

#include <cmath>
#include <cstddef>
#include <limits>

#include "attnkit/attention.hpp"
#include "attnkit/error.hpp"
#include "attnkit/tensor.hpp"
#include "bench/naive_attention.hpp"
#include "lab/gaussian.hpp"

namespace attnkit::lab {

namespace {

struct Inputs {
  std::int64_t n, m, d;
  std::vector<double> q, k, v;  // [n, d], [m, d], [m, d], entries N(0, 1); q not yet multiplied
};

Inputs draw_inputs(const PrecisionConfig& config, std::int64_t length) {
  Gaussian normal(config.seed, static_cast<std::uint64_t>(length));
  Inputs in{config.queries, length, config.head_dim, {}, {}, {}};
  for (auto* t : {&in.q, &in.k, &in.v}) {
    const std::int64_t rows = t == &in.q ? in.n : in.m;
    t->resize(static_cast<std::size_t>(rows * in.d));
    for (double& x : *t) x = normal();
  }
  return in;
}

// O = softmax(q·kᵀ/√d)·v in long double, two passes per row (max, then exp and sums).
std::vector<long double> exact_output(const Inputs& in, const std::vector<double>& q) {
  const auto n = static_cast<std::size_t>(in.n), m = static_cast<std::size_t>(in.m), d = static_cast<std::size_t>(in.d);
  const long double scale = 1.0L / std::sqrt(static_cast<long double>(in.d));
  std::vector<long double> out(n * d, 0.0L), logits(m);
  for (std::size_t i = 0; i < n; ++i) {
    long double max_logit = -std::numeric_limits<long double>::infinity();
    for (std::size_t j = 0; j < m; ++j) {
      long double dot = 0;
      for (std::size_t c = 0; c < d; ++c) dot += static_cast<long double>(q[i * d + c]) * in.k[j * d + c];
      logits[j] = dot * scale;
      if (logits[j] > max_logit) max_logit = logits[j];
    }
    long double sum = 0;
    for (std::size_t j = 0; j < m; ++j) {
      const long double p = std::exp(logits[j] - max_logit);
      sum += p;
      for (std::size_t c = 0; c < d; ++c) out[i * d + c] += p * in.v[j * d + c];
    }
    for (std::size_t c = 0; c < d; ++c) out[i * d + c] /= sum;
  }
  return out;
}

// The output of one variant, as doubles.
std::vector<double> variant_output(const PrecisionVariant& variant, const Inputs& in, const std::vector<double>& q) {
  const auto as_view = [](const std::vector<double>& x, std::int64_t rows, std::int64_t cols) {
    return ConstTensorView::contiguous(x.data(), DType::f64, {1, 1, rows, cols});
  };
  const DType dtype = variant.naive ? DType::f32 : variant.dtype;
  const Tensor tq = Tensor::converted(as_view(q, in.n, in.d), dtype);
  const Tensor tk = Tensor::converted(as_view(in.k, in.m, in.d), dtype);
  const Tensor tv = Tensor::converted(as_view(in.v, in.m, in.d), dtype);
  Tensor out(dtype, {1, 1, in.n, in.d});
  if (variant.naive) {
    bench::AttentionShape shape;
    shape.n = in.n;
    shape.m = in.m;
    shape.d_k = shape.d_v = in.d;
    bench::NaiveAttention(shape, 1).run(tq.data<float>(), tk.data<float>(), tv.data<float>(), out.data<float>());
  } else {
    AttentionOptions options;
    options.kernel = variant.kernel;
    forward(tq.view(), tk.view(), tv.view(), out.view(), options);
  }
  std::vector<double> result(static_cast<std::size_t>(out.numel()));
  for (std::size_t i = 0; i < result.size(); ++i) {
    result[i] = load_as_double(static_cast<const char*>(out.raw()) + i * dtype_size(dtype), dtype);
  }
  return result;
}

double relative_error(const std::vector<double>& got, const std::vector<long double>& exact) {
  long double diff = 0, norm = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const long double e = got[i] - exact[i];
    diff += e * e;
    norm += exact[i] * exact[i];
  }
  return static_cast<double>(std::sqrt(diff / norm));
}

}  // namespace

PrecisionResult precision_variants() {
  const PrecisionVariant candidates[] = {
      {"reference f64", Kernel::reference, DType::f64, false},
      {"fast f32", Kernel::fast, DType::f32, false},
      {"naive f32", Kernel::reference, DType::f32, true},
      {"fast bf16", Kernel::fast, DType::bf16, false},
      {"fast f16", Kernel::fast, DType::f16, false},
  };
  PrecisionResult result;
  for (const PrecisionVariant& v : candidates) {
    try {
      if (!v.naive) resolve_kernel(v.kernel, v.dtype);
      result.variants.push_back(v);
    } catch (const Error& e) {
      result.skipped.push_back(v.name + ": " + e.what());
    }
  }
  return result;
}

// Each (length, std) problem costs about its n·m·d products once per variant and once exactly.
double precision_work(const PrecisionConfig& config) {
  double total = 0;
  for (std::int64_t length : config.lengths) total += static_cast<double>(length);
  return total * static_cast<double>(config.logit_stds.size());
}

PrecisionResult run_precision(const PrecisionConfig& config, const WorkDone& done) {
  PrecisionResult result = precision_variants();
  std::vector<Inputs> inputs;
  for (std::int64_t length : config.lengths) inputs.push_back(draw_inputs(config, length));
  for (double logit_std : config.logit_stds) {
    for (const Inputs& in : inputs) {
      // With N(0, 1) entries, q·k/√d has unit variance; multiplying q by the std scales the logits.
      std::vector<double> q = in.q;
      for (double& x : q) x *= logit_std;
      const std::vector<long double> exact = exact_output(in, q);
      PrecisionRow row{logit_std, in.m, {}};
      for (const PrecisionVariant& v : result.variants) row.errors.push_back(relative_error(variant_output(v, in, q), exact));
      result.rows.push_back(std::move(row));
      if (done) done(static_cast<double>(in.m));
    }
  }
  return result;
}

}  // namespace attnkit::lab
