// Computes one small attention through the installed library and checks it against the hand result.
#include <attnkit/attnkit.hpp>

#include <cmath>
#include <cstdio>

int main() {
  float q[3] = {0.5f, 0.3f, -0.2f};
  float k[9] = {0.4f, 0.2f, -0.1f, 0.1f, 0.1f, 0.8f, -0.3f, 0.4f, 0.2f};
  float v[9] = {0.9f, 0.1f, 0.3f, 0.2f, 0.5f, 0.1f, 0.3f, 0.2f, 0.4f};
  float o[3] = {};
  using attnkit::ConstTensorView, attnkit::DType;
  attnkit::forward(ConstTensorView::contiguous(q, DType::f32, {1, 1, 1, 3}),
                   ConstTensorView::contiguous(k, DType::f32, {1, 1, 3, 3}),
                   ConstTensorView::contiguous(v, DType::f32, {1, 1, 3, 3}),
                   attnkit::TensorView::contiguous(o, DType::f32, {1, 1, 1, 3}));
  const float expected[3] = {0.497297f, 0.254652f, 0.269284f};  // hand-computed
  for (int c = 0; c < 3; ++c) {
    if (std::fabs(o[c] - expected[c]) > 1e-5f) {
      std::printf("consumer: out[%d] = %f, expected %f\n", c, o[c], expected[c]);
      return 1;
    }
  }
  std::printf("consumer: attnkit %s found and working\n", attnkit::version());
  return 0;
}
