/* attnkit from C: causal attention with grouped-query heads, checked against a plain loop in
 * double, then an error on purpose. Build: cc -std=c11 forward.c $(pkg-config --cflags --libs attnkit) -lm */
#include <attnkit/attnkit.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { B = 2, HQ = 4, HKV = 2, N = 5, D = 8 };

static float q[B][HQ][N][D], k[B][HKV][N][D], v[B][HKV][N][D], out[B][HQ][N][D];

int main(void) {
  srand(7);
  for (int i = 0; i < B * HQ * N * D; ++i) (&q[0][0][0][0])[i] = (float)rand() / RAND_MAX - 0.5f;
  for (int i = 0; i < B * HKV * N * D; ++i) (&k[0][0][0][0])[i] = (float)rand() / RAND_MAX - 0.5f;
  for (int i = 0; i < B * HKV * N * D; ++i) (&v[0][0][0][0])[i] = (float)rand() / RAND_MAX - 0.5f;

  attnkit_tensor tq, tk, tv, tout;
  const int64_t q_shape[4] = {B, HQ, N, D}, kv_shape[4] = {B, HKV, N, D};
  attnkit_tensor_contiguous(&tq, q, ATTNKIT_F32, 4, q_shape);
  attnkit_tensor_contiguous(&tk, k, ATTNKIT_F32, 4, kv_shape);
  attnkit_tensor_contiguous(&tv, v, ATTNKIT_F32, 4, kv_shape);
  attnkit_tensor_contiguous(&tout, out, ATTNKIT_F32, 4, q_shape);

  attnkit_options options;
  attnkit_options_init(&options);
  options.causal = ATTNKIT_CAUSAL_TOP_LEFT;
  attnkit_status status = attnkit_forward(&tq, &tk, &tv, &tout, &options, NULL, NULL);
  if (status != ATTNKIT_OK) {
    fprintf(stderr, "attnkit_forward: %s: %s\n", attnkit_status_name(status), attnkit_last_error_message());
    return 1;
  }

  /* The same in double: query head h reads KV head h / (HQ / HKV), keys j <= i. */
  double worst = 0.0;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < HQ; ++h)
      for (int i = 0; i < N; ++i) {
        const int g = h / (HQ / HKV);
        double s[N], top = -INFINITY, sum = 0.0;
        for (int j = 0; j <= i; ++j) {
          s[j] = 0.0;
          for (int c = 0; c < D; ++c) s[j] += (double)q[b][h][i][c] * k[b][g][j][c];
          s[j] /= sqrt((double)D);
          if (s[j] > top) top = s[j];
        }
        for (int j = 0; j <= i; ++j) sum += (s[j] = exp(s[j] - top));
        for (int c = 0; c < D; ++c) {
          double o = 0.0;
          for (int j = 0; j <= i; ++j) o += s[j] / sum * v[b][g][j][c];
          if (fabs(o - out[b][h][i][c]) > worst) worst = fabs(o - out[b][h][i][c]);
        }
      }
  const char* target = "unknown";
  attnkit_active_target(&target);
  printf("attnkit %s (%s): causal GQA attention, max |difference| from double: %.2g\n", attnkit_version(), target,
         worst);
  if (worst > 1e-5) return 1;

  /* An error: keys of 3 batch entries for queries of 2. Nothing is written; the message says why. */
  const int64_t bad_shape[4] = {3, HKV, N, D};
  attnkit_tensor_contiguous(&tk, k, ATTNKIT_F32, 4, bad_shape);
  status = attnkit_forward(&tq, &tk, &tv, &tout, &options, NULL, NULL);
  printf("on purpose: %s: %s\n", attnkit_status_name(status), attnkit_last_error_message());
  return status == ATTNKIT_INVALID_SHAPE ? 0 : 1;
}
