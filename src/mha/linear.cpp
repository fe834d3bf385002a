#include "mha/linear.hpp"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <mutex>
#include <string>

#include "attnkit/blas.hpp"
#include "attnkit/error.hpp"
#include "core/integer.hpp"
#include "core/parallel_for.hpp"

extern "C" void openblas_set_num_threads(int num_threads);
extern "C" char* openblas_get_config(void);

namespace attnkit::mha {
namespace {

// Fixed block sizes: each block is one BLAS call on one of our threads.
constexpr std::int64_t kRowBlock = 64;
constexpr std::int64_t kFeatureBlock = 64;
constexpr std::int64_t kFewRows = 4;  // up to this many rows, linear reads the weights by matrix-vector products

using detail::ceil_div;

// BLAS takes int sizes; the module validates its sizes against this before any call.
int blas_int(std::int64_t x) {
  if (x > INT_MAX) throw Error(ErrorCode::size_overflow, "projection: a size of " + std::to_string(x) + " exceeds BLAS's int");
  return static_cast<int>(x);
}

// OpenBLAS runs one thread per call: attnkit's pool splits the work. (This sets OpenBLAS's
// process-wide thread count, once.) Also once: a generic core on a capable CPU is said on stderr,
// since every projection then runs several times slower than it could (see attnkit/blas.hpp).
void hold_blas_to_one_thread() {
  static std::once_flag once;
  std::call_once(once, [] {
    openblas_set_num_threads(1);
    const BlasCoreVerdict verdict = projection_blas().verdict;
    if (verdict.generic) std::fprintf(stderr, "attnkit: %s\n", verdict.message.c_str());
  });
}

// A few rows (a decoding step): the weights are read once and dominate. sgemm would pack them for
// reuse that never comes (at one row it streamed them at a quarter of sgemv's rate here), and
// blocks of rows would leave one thread doing everything; so blocks of output features, each a
// matrix-vector product per row, spread over the threads.
void linear_few_rows(const float* x, std::int64_t rows, std::int64_t in, const float* w, std::int64_t out,
                     const float* b, float* y) {
  detail::parallel_for(ceil_div(out, kFeatureBlock), [&](std::int64_t block) {
    const std::int64_t o0 = block * kFeatureBlock, count = std::min(kFeatureBlock, out - o0);
    for (std::int64_t r = 0; r < rows; ++r) {
      float* y_row = y + r * out + o0;
      if (b != nullptr) {
        std::copy(b + o0, b + o0 + count, y_row);
      } else {
        std::fill(y_row, y_row + count, 0.0f);
      }
      if (in == 0) continue;
      cblas_sgemv(CblasRowMajor, CblasNoTrans, blas_int(count), blas_int(in), 1.0f, w + o0 * in, blas_int(in),
                  x + r * in, 1, 1.0f, y_row, 1);
    }
  });
}

}  // namespace

void linear(const float* x, std::int64_t rows, std::int64_t in, const float* w, std::int64_t out, const float* b,
            float* y) {
  if (rows == 0 || out == 0) return;
  hold_blas_to_one_thread();
  if (rows <= kFewRows) return linear_few_rows(x, rows, in, w, out, b, y);
  detail::parallel_for(ceil_div(rows, kRowBlock), [&](std::int64_t block) {
    const std::int64_t r0 = block * kRowBlock, count = std::min(kRowBlock, rows - r0);
    float* y_rows = y + r0 * out;
    for (std::int64_t r = 0; r < count; ++r) {
      if (b != nullptr) {
        std::copy(b, b + out, y_rows + r * out);
      } else {
        std::fill(y_rows + r * out, y_rows + (r + 1) * out, 0.0f);
      }
    }
    if (in == 0) return;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blas_int(count), blas_int(out), blas_int(in), 1.0f,
                x + r0 * in, blas_int(in), w, blas_int(in), 1.0f, y_rows, blas_int(out));
  });
}

void linear_input_gradient(const float* dy, std::int64_t rows, std::int64_t out, const float* w, std::int64_t in,
                           float* dx) {
  if (rows == 0 || in == 0) return;
  hold_blas_to_one_thread();
  detail::parallel_for(ceil_div(rows, kRowBlock), [&](std::int64_t block) {
    const std::int64_t r0 = block * kRowBlock, count = std::min(kRowBlock, rows - r0);
    if (out == 0) {
      std::fill(dx + r0 * in, dx + (r0 + count) * in, 0.0f);
      return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, blas_int(count), blas_int(in), blas_int(out), 1.0f,
                dy + r0 * out, blas_int(out), w, blas_int(in), 0.0f, dx + r0 * in, blas_int(in));
  });
}

void linear_weight_gradient(const float* dy, std::int64_t rows, std::int64_t out, const float* x, std::int64_t in,
                            float* dw, float* db) {
  if (out == 0) return;
  hold_blas_to_one_thread();
  detail::parallel_for(ceil_div(out, kFeatureBlock), [&](std::int64_t block) {
    const std::int64_t o0 = block * kFeatureBlock, count = std::min(kFeatureBlock, out - o0);
    if (db != nullptr) {
      for (std::int64_t o = o0; o < o0 + count; ++o) {
        double sum = 0;  // a fixed order, in double: the bias gradient sums every row
        for (std::int64_t r = 0; r < rows; ++r) sum += dy[r * out + o];
        db[o] = static_cast<float>(sum);
      }
    }
    if (in == 0) return;
    if (rows == 0) {
      std::fill(dw + o0 * in, dw + (o0 + count) * in, 0.0f);
      return;
    }
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, blas_int(count), blas_int(in), blas_int(rows), 1.0f, dy + o0,
                blas_int(out), x, blas_int(in), 0.0f, dw + o0 * in, blas_int(in));
  });
}

const char* blas_description() { return openblas_get_config(); }

}  // namespace attnkit::mha
