// attnkit quick start: causal attention over [batch, seq, heads, dim] memory, with the log-sum-exp,
// then the gradients. Built and run by the tests, so it stays true.
#include <attnkit/attnkit.hpp>

#include <cmath>
#include <cstdio>

int main() {
  using attnkit::DType, attnkit::Tensor;
  const std::int64_t B = 1, S = 6, Hq = 4, Hkv = 2, D = 8;

  // Memory in [B, S, H, D] order, as many engines keep it; viewed as [B, H, S, D] without a copy.
  Tensor q(DType::f32, {B, S, Hq, D}), k(DType::f32, {B, S, Hkv, D}), v(DType::f32, {B, S, Hkv, D});
  for (Tensor* t : {&q, &k, &v})
    for (std::int64_t i = 0; i < t->numel(); ++i) t->data<float>()[i] = std::sin(0.37f * static_cast<float>(i));
  auto bhsd = [](Tensor& t) { return t.view().permuted({0, 2, 1, 3}); };

  Tensor out(DType::f32, {B, S, Hq, D}), lse(DType::f32, {B, Hq, S});
  attnkit::AttentionOptions options;
  options.causal = attnkit::Causal::top_left;  // grouped-query: 4 query heads share 2 KV heads
  attnkit::forward(bhsd(q), bhsd(k), bhsd(v), bhsd(out), options, {.lse = lse.view()});

  // Gradients of L = sum(out): d_out is all ones.
  Tensor d_out(DType::f32, {B, S, Hq, D}), dq(DType::f32, {B, S, Hq, D}), dk(DType::f32, {B, S, Hkv, D}),
      dv(DType::f32, {B, S, Hkv, D});
  for (std::int64_t i = 0; i < d_out.numel(); ++i) d_out.data<float>()[i] = 1.0f;
  attnkit::backward(bhsd(q), bhsd(k), bhsd(v), bhsd(out), bhsd(d_out), lse.view(), bhsd(dq), bhsd(dk), bhsd(dv),
                    options);

  // The first query sees only the first key, so its output is that key's value vector.
  std::printf("attnkit %s, kernel %s\n", attnkit::version(), attnkit::kernel_name(attnkit::resolve_kernel(options.kernel)));
  std::printf("out[0, 0, head 0, :2] = %.4f %.4f (v[0, 0, kv head 0, :2] = %.4f %.4f)\n", out.data<float>()[0],
              out.data<float>()[1], v.data<float>()[0], v.data<float>()[1]);
  std::printf("lse[0, head 0, query 0] = %.4f\n", lse.data<float>()[0]);

  // Bad input raises attnkit::Error naming the argument and the shapes.
  try {
    Tensor wrong(DType::f32, {B, 3, Hkv, D});
    attnkit::forward(bhsd(q), bhsd(wrong), bhsd(v), bhsd(out));
  } catch (const attnkit::Error& e) {
    std::printf("error (%s): %s\n", attnkit::error_code_name(e.code()), e.what());
    return out.data<float>()[0] == v.data<float>()[0] ? 0 : 1;
  }
  return 1;
}
