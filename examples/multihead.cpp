// attnkit multi-head attention: a self-attention layer with grouped-query heads and RoPE, saved to
// and reloaded from .safetensors, then its gradients. Built and run by the tests, so it stays true.
#include <attnkit/attnkit.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>

int main() {
  using attnkit::DType, attnkit::Tensor;
  attnkit::MultiHeadAttention mha({.embed_dim = 64, .num_heads = 8, .num_kv_heads = 2,
                                   .rope = attnkit::RopeConfig{}});

  // Weights round-trip through a file in torch's state-dict layout.
  const std::string path = (std::filesystem::temp_directory_path() / "attnkit_multihead_example.safetensors").string();
  mha.save(path);
  attnkit::MultiHeadAttention loaded({.embed_dim = 64, .num_heads = 8, .num_kv_heads = 2,
                                      .rope = attnkit::RopeConfig{}}, /*seed=*/99);
  loaded.load(path);
  std::filesystem::remove(path);

  Tensor x(DType::f32, {2, 10, 64}), dy(DType::f32, {2, 10, 64});  // [batch, seq, embed]
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    x.data<float>()[i] = std::sin(0.1f * static_cast<float>(i));
    dy.data<float>()[i] = 1.0f;
  }
  attnkit::MultiHeadAttentionContext ctx;  // what backward needs
  auto [y, weights] = loaded.forward(x.view(), x.view(), x.view(),
                                     {.causal = attnkit::Causal::top_left, .need_weights = true}, &ctx);
  const auto grads = loaded.backward(ctx, dy.view());

  // The same weights give the same output; each row of causal weights sums to 1.
  const Tensor y0 = mha.forward(x.view(), x.view(), x.view(), {.causal = attnkit::Causal::top_left}).out;
  float row_sum = 0;
  for (std::int64_t j = 0; j < 10; ++j) row_sum += weights->data<float>()[3 * 10 + j];
  const bool ok = y0.data<float>()[5] == y.data<float>()[5] && std::fabs(row_sum - 1.0f) < 1e-5f &&
                  grads.d_weights.count("in_proj_bias") == 1;
  std::printf("y[0, 0, :3] = %.4f %.4f %.4f, |dW_o[0, 0]| = %.4f, %zu parameter gradients: %s\n",
              y.data<float>()[0], y.data<float>()[1], y.data<float>()[2],
              std::fabs(grads.d_weights.at("out_proj.weight").data<float>()[0]), grads.d_weights.size(),
              ok ? "ok" : "MISMATCH");
  return ok ? 0 : 1;
}
