// Loading or computing the attention weights that `attnkit heatmap` draws.
#include "heatmap/weights.hpp"

#include <cstddef>
#include <utility>

#include "attnkit/attention.hpp"
#include "attnkit/error.hpp"
#include "attnkit/npy.hpp"
#include "value_parsers.hpp"

namespace attnkit::cli {

namespace {

constexpr int kMatrixRank = 2;  // [n, m]: one head of one batch entry

// Weights above 1 by a rounding of the dtype that stored them (bf16: 2^-8) are still weights.
constexpr double kLargestWeight = 1.0 + 0x1p-7;

std::string range_text(std::int64_t count) {
  return count == 0 ? "none" : "0.." + std::to_string(count - 1);
}

}  // namespace

HeadWeights select_heads(ConstTensorView probs, const Selection& selection, const std::string& source) {
  const std::int64_t batch = probs.size(0), heads = probs.size(1);
  if (selection.batch < 0 || selection.batch >= batch) {
    throw Error(ErrorCode::invalid_argument, "--batch " + std::to_string(selection.batch) + ": " + source +
                                                 " has batch size " + std::to_string(batch) + " (valid " +
                                                 range_text(batch) + ")");
  }
  std::vector<std::int64_t> chosen = selection.heads;
  if (chosen.empty()) {
    for (std::int64_t h = 0; h < heads; ++h) chosen.push_back(h);
  }
  for (std::int64_t h : chosen) {
    if (h < 0 || h >= heads) {
      throw Error(ErrorCode::invalid_argument, "--heads: head " + std::to_string(h) + " does not exist; " + source +
                                                   " has " + std::to_string(heads) + " heads (valid " +
                                                   range_text(heads) + ")");
    }
  }
  HeadWeights w;
  w.n = probs.size(2);
  w.m = probs.size(3);
  w.heads = chosen;
  for (std::int64_t h : chosen) {
    std::vector<float> matrix(static_cast<std::size_t>(w.n * w.m));
    for (std::int64_t i = 0; i < w.n; ++i) {
      for (std::int64_t j = 0; j < w.m; ++j) {
        // Strides count elements of a dtype chosen at run time: step over bytes.
        const std::int64_t offset = selection.batch * probs.stride(0) + h * probs.stride(1) + i * probs.stride(2) +
                                    j * probs.stride(3);
        const auto* base = static_cast<const unsigned char*>(probs.data());
        const double weight = load_as_double(base + offset * static_cast<std::int64_t>(dtype_size(probs.dtype())), probs.dtype());
        if (!(weight >= 0 && weight <= kLargestWeight)) {  // NaN fails both
          throw Error(ErrorCode::invalid_argument,
                      source + ": weight [" + std::to_string(selection.batch) + ", " + std::to_string(h) + ", " +
                          std::to_string(i) + ", " + std::to_string(j) + "] is " + short_number(weight) +
                          "; attention weights lie in [0, 1], and the picture's scale assumes so");
        }
        matrix[static_cast<std::size_t>(i * w.m + j)] = static_cast<float>(weight);
      }
    }
    w.weights.push_back(std::move(matrix));
  }
  return w;
}

HeadWeights load_probs(const std::string& path, const Selection& selection) {
  const Tensor probs = read_npy(path);
  const std::string source = "--probs " + path;
  if (probs.rank() < kMatrixRank || probs.rank() > kAttentionRank) {
    throw Error(ErrorCode::invalid_shape, source + ": expected the probabilities of `attnkit run --probs`, shape "
                                                   "[B, H, n, m], [H, n, m] or [n, m]; got " +
                                                   shape_of(probs));
  }
  if (!is_floating(probs.dtype())) {
    throw Error(ErrorCode::invalid_dtype, source + " has dtype " + std::string(dtype_name(probs.dtype())) +
                                              "; attention weights must be a floating array");
  }
  return select_heads(probs.view4(), selection, source);
}

HeadWeights compute_probs(const std::string& q_path, const std::string& k_path,
                          const std::optional<std::string>& v_path, const AttentionFlags& flags,
                          const Selection& selection) {
  Tensor q = read_npy(q_path), k = read_npy(k_path);
  check_rank(q, "--q", q_path);
  check_rank(k, "--k", k_path);
  Tensor v;
  if (v_path) {
    v = read_npy(*v_path);
    check_rank(v, "--v", *v_path);
  } else {
    std::vector<std::int64_t> shape = k.shape();
    shape.back() = 1;  // one zero column: V does not change the weights
    v = Tensor(DType::f64, shape);
  }
  if (k.rank() != q.rank() || v.rank() != q.rank()) {
    throw Error(ErrorCode::invalid_shape, "--q, --k and --v must have the same rank; got q " + shape_of(q) +
                                              ", k " + shape_of(k) + ", v " + shape_of(v));
  }
  const DType dtype = compute_dtype(flags.dtype, q, q_path);
  q = as_dtype(std::move(q), dtype);
  k = input_as(std::move(k), dtype, flags.dtype, "--k", k_path);
  // A V made up above (zeros) takes the dtype as it is; a given one must match like K.
  v = v_path ? input_as(std::move(v), dtype, flags.dtype, "--v", *v_path) : as_dtype(std::move(v), dtype);
  Tensor mask;
  if (flags.mask_path) mask = read_npy(*flags.mask_path);
  const AttentionOptions options = with_spans(flags, flags.mask_path ? &mask : nullptr);

  const ConstTensorView q4 = q.view4(), k4 = k.view4(), v4 = v.view4();
  const std::int64_t batch = q4.size(0), heads = q4.size(1), n = q4.size(2), m = k4.size(2);
  Tensor out(dtype, {batch, heads, n, v4.size(3)});
  Tensor probs(DType::f32, {batch, heads, n, m});
  ForwardExtras extras;
  extras.probs = probs.view();
  forward(q4, k4, v4, out.view(), options, extras);
  return select_heads(probs.view(), selection, "--q " + q_path);
}

}  // namespace attnkit::cli
