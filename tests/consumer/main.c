/* The same attention through the installed C API, linked with the CMake target attnkit::attnkit_c. */
#include <attnkit/attnkit.h>
#include <math.h>
#include <stdio.h>

int main(void) {
  float q[3] = {0.5f, 0.3f, -0.2f};
  float k[9] = {0.4f, 0.2f, -0.1f, 0.1f, 0.1f, 0.8f, -0.3f, 0.4f, 0.2f};
  float v[9] = {0.9f, 0.1f, 0.3f, 0.2f, 0.5f, 0.1f, 0.3f, 0.2f, 0.4f};
  float o[3] = {0};
  const int64_t q_shape[4] = {1, 1, 1, 3}, kv_shape[4] = {1, 1, 3, 3};
  attnkit_tensor tq, tk, tv, to;
  attnkit_tensor_contiguous(&tq, q, ATTNKIT_F32, 4, q_shape);
  attnkit_tensor_contiguous(&tk, k, ATTNKIT_F32, 4, kv_shape);
  attnkit_tensor_contiguous(&tv, v, ATTNKIT_F32, 4, kv_shape);
  attnkit_tensor_contiguous(&to, o, ATTNKIT_F32, 4, q_shape);
  if (attnkit_forward(&tq, &tk, &tv, &to, NULL, NULL, NULL) != ATTNKIT_OK) {
    printf("consumer_c: %s\n", attnkit_last_error_message());
    return 1;
  }
  const float expected[3] = {0.497297f, 0.254652f, 0.269284f}; /* hand-computed */
  for (int c = 0; c < 3; ++c) {
    if (fabsf(o[c] - expected[c]) > 1e-5f) {
      printf("consumer_c: out[%d] = %f, expected %f\n", c, o[c], expected[c]);
      return 1;
    }
  }
  printf("consumer_c: the C API of attnkit %s found and working\n", attnkit_version());
  return 0;
}
