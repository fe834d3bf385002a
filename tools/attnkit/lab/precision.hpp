// `attnkit lab precision`: how far each kernel and dtype of this build lands from the exact output,
// as the sequence grows and the logits grow. The exact output is computed here in long double
// (64-bit significand on x86), so that the float64 reference kernel's own error shows too.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attnkit/dtype.hpp"
#include "attnkit/options.hpp"
#include "lab/work_done.hpp"

namespace attnkit::lab {

struct PrecisionConfig {
  std::vector<std::int64_t> lengths = {16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192};  // m keys
  std::vector<double> logit_stds = {1, 10, 100};  // Q is multiplied by this: logits ~ N(0, std²)
  int queries = 64;   // n query rows per problem: enough that a few near-tie rows do not decide the error
  int head_dim = 64;  // d_k = d_v
  std::uint64_t seed = 1;
};

// One line of the figure: a kernel on one input dtype, or the naive f32 formula.
struct PrecisionVariant {
  std::string name;  // "reference f64", "fast f32", "naive f32", "fast bf16", "fast f16"
  Kernel kernel = Kernel::reference;
  DType dtype = DType::f64;
  bool naive = false;  // the plain float32 loops of `attnkit bench`'s naive baseline
};

struct PrecisionRow {
  double logit_std = 0;
  std::int64_t length = 0;
  // Per variant: ‖O − O_exact‖_F / ‖O_exact‖_F over the n × d_v outputs (the relative RMS error),
  // with O in the variant's dtype and the inputs rounded to it.
  std::vector<double> errors;
};

struct PrecisionResult {
  std::vector<PrecisionVariant> variants;  // those this build can run
  std::vector<std::string> skipped;        // why the others cannot
  std::vector<PrecisionRow> rows;          // logit std major, then length
};

// The variants this build has, and notes for the ones it has not.
PrecisionResult precision_variants();
// The total units `done` is called with (a problem of m keys counts m).
double precision_work(const PrecisionConfig& config);
// Reproducible: the inputs of each length come from their own stream of (seed, length) and are the
// same for every logit std (only Q's factor changes).
PrecisionResult run_precision(const PrecisionConfig& config, const WorkDone& done = {});

}  // namespace attnkit::lab
