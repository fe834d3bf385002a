// The OpenBLAS baseline: the composition a user writes by hand with a BLAS library,
//   S = sgemm(Q, Kᵀ) · scale  →  row softmax (std::exp, causal keys zeroed)  →  O = sgemm(P, V)
// for blocks of query rows spread over threads, with OpenBLAS itself single-threaded (its fastest
// form when our threads already occupy every core). The scores of a block are materialised, so its
// memory grows with rows × m, and at long sequences they leave the caches.
//
// Built from blas_attention.cpp when CMake finds OpenBLAS (ATTNKIT_HAVE_OPENBLAS), else from
// blas_attention_missing.cpp, whose constructor throws and whose info() says why.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attnkit/blas.hpp"
#include "bench/attention_shape.hpp"

namespace attnkit::bench {

struct BlasInfo {
  bool available = false;
  std::string description;  // "OpenBLAS 0.3.21 ..., core Zen", or why there is no BLAS baseline
  std::string core;         // openblas_get_corename(); empty when unavailable
  // judge_blas_core(core, this CPU): a generic core on a CPU with AVX2 or AVX-512 (attnkit/blas.hpp).
  // Not judged (kind other, generic false) when unavailable.
  BlasCoreVerdict verdict;
};

class BlasAttention {
 public:
  // Rows per sgemm: 256 rows keep sgemm at full speed (its M dimension) while leaving several
  // blocks per head, so causal rows balance over threads. At m = 8192 a block's scores are 8 MiB:
  // beyond the L2 cache, as in any composition that materialises scores.
  static constexpr std::int64_t kRowsPerBlock = 256;

  static BlasInfo info();

  // Sets OpenBLAS to one thread and allocates and touches each thread's score block. Throws
  // std::runtime_error when this build has no OpenBLAS.
  BlasAttention(const AttentionShape& shape, int threads, std::int64_t rows_per_block = kRowsPerBlock);

  // out = softmax(q·kᵀ·scale)·v. Layouts: attention_shape.hpp.
  void run(const float* q, const float* k, const float* v, float* out);

 private:
  AttentionShape shape_;
  int threads_;
  RowBlocks blocks_;
  std::vector<std::vector<float>> scores_;  // per thread: rows_per_block × m
};

}  // namespace attnkit::bench
