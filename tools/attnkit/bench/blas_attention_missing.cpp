// Stands in for blas_attention.cpp when CMake did not find OpenBLAS: the bench then runs without
// that baseline and says why.
#include <stdexcept>

#include "bench/blas_attention.hpp"

namespace attnkit::bench {

namespace {

constexpr const char* kWhy =
    "not built: CMake found no OpenBLAS (pkg-config 'openblas'); install libopenblas-dev and reconfigure";

}  // namespace

BlasInfo BlasAttention::info() { return {false, kWhy, "", {}}; }

BlasAttention::BlasAttention(const AttentionShape& shape, int threads, std::int64_t rows_per_block)
    : shape_(shape), threads_(threads), blocks_(shape, rows_per_block) {
  throw std::runtime_error(kWhy);
}

void BlasAttention::run(const float*, const float*, const float*, float*) { throw std::runtime_error(kWhy); }

}  // namespace attnkit::bench
