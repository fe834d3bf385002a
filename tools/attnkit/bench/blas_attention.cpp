// The OpenBLAS composition: sgemm, softmax, sgemm per block of query rows.
#include "bench/blas_attention.hpp"
#include "bench/row_softmax.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "bench/thread_team.hpp"

// Declared again in case a cblas.h without OpenBLAS's extensions comes first on the include path
// (a redeclaration with the same signature is harmless).
extern "C" void openblas_set_num_threads(int num_threads);
extern "C" char* openblas_get_corename(void);
extern "C" char* openblas_get_config(void);

namespace attnkit::bench {

namespace {

int to_int(std::int64_t x) { return static_cast<int>(x); }  // BLAS sizes; the bench's fit easily

}  // namespace

BlasInfo BlasAttention::info() {
  BlasInfo i;
  i.available = true;
  i.core = openblas_get_corename();
  i.description = std::string(openblas_get_config()) + ", core " + i.core + ", one BLAS thread per bench thread";
  i.verdict = judge_blas_core(i.core, cpu_vector_features());
  return i;
}

BlasAttention::BlasAttention(const AttentionShape& shape, int threads, std::int64_t rows_per_block)
    : shape_(shape), threads_(threads), blocks_(shape, rows_per_block) {
  openblas_set_num_threads(1);  // our threads split the rows; OpenBLAS's own would oversubscribe
  const auto scratch = static_cast<std::size_t>(blocks_.rows_per_block() * shape.m);
  for (int t = 0; t < threads; ++t) scores_.emplace_back(scratch, 0.0f);  // zero-filled: every page touched
}

void BlasAttention::run(const float* q, const float* k, const float* v, float* out) {
  const AttentionShape& s = shape_;
  for_each_task(threads_, blocks_.count(), [&](int thread, std::int64_t task) {
    const RowBlock b = blocks_[task];
    float* scores = scores_[static_cast<std::size_t>(thread)].data();
    const float* q_rows = q + s.q_offset(b.batch, b.head) + b.row_begin * s.d_k;
    const float* k_head = k + s.k_offset(b.batch, b.head);
    const float* v_head = v + s.v_offset(b.batch, b.head);
    float* out_rows = out + s.out_offset(b.batch, b.head) + b.row_begin * s.d_v;
    // Keys any row of the block sees: with causal masking, those up to the block's last row.
    const std::int64_t keys = s.visible_keys(b.row_end - 1);
    if (keys == 0) {  // m = 0: rows with no visible key are 0 (BLAS refuses a leading dimension of 0)
      std::fill(out_rows, out_rows + b.rows() * s.d_v, 0.0f);
      return;
    }

    // scores[rows × keys] = q_rows · k_headᵀ · scale
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, to_int(b.rows()), to_int(keys), to_int(s.d_k), s.scale(),
                q_rows, to_int(s.d_k), k_head, to_int(s.d_k), 0.0f, scores, to_int(keys));
    for (std::int64_t i = b.row_begin; i < b.row_end; ++i) {
      softmax_row(scores + (i - b.row_begin) * keys, s.visible_keys(i), keys);
    }
    // out_rows[rows × d_v] = scores · v_head
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, to_int(b.rows()), to_int(s.d_v), to_int(keys), 1.0f,
                scores, to_int(keys), v_head, to_int(s.d_v), 0.0f, out_rows, to_int(s.d_v));
  });
}

}  // namespace attnkit::bench
