// The soak run's random inputs: shapes, layouts and options drawn so that every feature of a call
// appears, alone and in combination, including the corners (empty sizes, rows with no visible key,
// decoding past the split-key threshold, sequence-major strides).
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "attnkit/options.hpp"
#include "attnkit/tensor.hpp"

namespace attnkit::cli::soak {

class Random {
 public:
  explicit Random(std::uint64_t seed) : engine_(seed) {}
  std::int64_t integer(std::int64_t lo, std::int64_t hi) { return std::uniform_int_distribution<std::int64_t>(lo, hi)(engine_); }
  double uniform(double lo = 0.0, double hi = 1.0) { return std::uniform_real_distribution<double>(lo, hi)(engine_); }
  bool chance(double p) { return uniform() < p; }
  double normal() { return normal_(engine_); }
  std::uint64_t bits() { return engine_(); }

 private:
  std::mt19937_64 engine_;
  std::normal_distribution<double> normal_{0.0, 1.0};
};

struct Shape {
  std::int64_t batch = 1, q_heads = 1, kv_heads = 1, n = 1, m = 1, d_k = 1, d_v = 1;
};

// Up to 2 × 9 heads, n and m up to ~100 and 300; one call in five decodes (n ≤ 16) over up to 2600
// keys, past the fast kernel's split-key threshold; about one in forty has an empty size.
Shape random_shape(Random& random, bool decode_allowed);

// N(0, 1) values rounded to `dtype`, stored head-major [B, H, S, D] or sequence-major [B, S, H, D]
// (seen through a permuted view, as PyTorch's [B, S, H, D] tensors are passed); `exact` holds the
// same rounded values in float64, contiguous, for the reference.
struct Input {
  Tensor storage;
  ConstTensorView view;  // [B, H, S, D]
  Tensor exact;          // f64 [B, H, S, D]
  double max_abs = 0.0;
  double max_row_norm = 0.0;  // largest Euclidean norm of a row of D features
};
Input random_input(Random& random, DType dtype, std::int64_t batch, std::int64_t heads, std::int64_t length,
                   std::int64_t dim, bool sequence_major);

// Options with everything they point at (the spans and the mask live here, so keep this alive and
// in place while `options` is used).
struct RandomOptions {
  AttentionOptions options;
  std::vector<std::int64_t> key_lengths;
  std::vector<float> alibi_slopes;
  std::optional<Tensor> mask;
  std::string text;  // " causal=bottom_right window=(3,-1) mask=bool[n,m] ..."

  double keep_scale() const { return 1.0 / (1.0 - options.dropout_p); }
};
void random_options(Random& random, const Shape& shape, bool dropout_allowed, RandomOptions& out);

// The scale the logits are multiplied by: the option, or 1/√d_k.
double call_scale(const Shape& shape, const AttentionOptions& options);

// The largest |logit| a call can have: scale · max‖q_i‖ · max‖k_j‖ (Cauchy–Schwarz), or the softcap
// when it is set, plus the largest ALiBi term and the largest finite additive mask entry.
double logit_magnitude(const Shape& shape, const Input& q, const Input& k, const AttentionOptions& options,
                       const std::optional<Tensor>& mask);

// "B=2 Hq=4 Hkv=2 n=77 m=300 d_k=40 d_v=40"
std::string describe(const Shape& shape);

}  // namespace attnkit::cli::soak
