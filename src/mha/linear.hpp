// The module's projections, y = x·Wᵀ + b, and their gradients, in float32 through OpenBLAS. Rows (or,
// for weight gradients and for a decoding step's few rows, output features) are cut into blocks of a
// fixed size and the blocks spread
// over attnkit's thread pool, with OpenBLAS itself held to one thread: the two pools never compete
// for the cores, and results do not depend on the thread count.
#pragma once

#include <cstdint>

namespace attnkit::mha {

// y[r][o] = Σ_i x[r][i] · w[o][i] + b[o]   (b may be null)        x [rows, in], w [out, in], y [rows, out]
void linear(const float* x, std::int64_t rows, std::int64_t in, const float* w, std::int64_t out, const float* b,
            float* y);

// dx[r][i] = Σ_o dy[r][o] · w[o][i]                                 dx [rows, in]
void linear_input_gradient(const float* dy, std::int64_t rows, std::int64_t out, const float* w, std::int64_t in,
                           float* dx);

// dw[o][i] = Σ_r dy[r][o] · x[r][i];  db[o] = Σ_r dy[r][o] (db may be null)
void linear_weight_gradient(const float* dy, std::int64_t rows, std::int64_t out, const float* x, std::int64_t in,
                            float* dw, float* db);

// A one-line description of the BLAS in use, e.g. "OpenBLAS 0.3.21 ... core Haswell".
const char* blas_description();

}  // namespace attnkit::mha
