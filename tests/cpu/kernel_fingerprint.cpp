// Prints a hash of every output and gradient of a fixed set of fast-kernel calls, per target: the
// forward's packed f32 and bf16 paths, decoding from key rows (f32, bf16, f16, int8 and int4 caches),
// split keys, masks, biases, softcap, ALiBi, windows, dropout, non-finite values, probabilities and
// the backward. Two builds whose kernels compute the same thing print the same lines, so a change
// meant to restructure the kernels without changing their results is checked by running this program
// from the build before and after it and comparing (docs/testing.md, "Kernel fingerprints").
//
//   kernel_fingerprint [TARGET [CASE]]   every supported target and case, or only those named
#include <attnkit/attnkit.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace {

using attnkit::ConstTensorView;
using attnkit::DType;
using attnkit::TensorView;

// FNV-1a over the bytes of every buffer a case wrote.
struct Hash {
  std::uint64_t h = 14695981039346656037ull;
  void add(const void* data, std::size_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  }
};

// A contiguous [B, H, S, D] buffer of `dtype` filled from normal values of the given spread.
struct Buffer {
  DType dtype;
  std::vector<std::int64_t> sizes;
  std::vector<unsigned char> bytes;
  Buffer(DType d, std::vector<std::int64_t> s, std::mt19937& rng, float spread = 1.0f) : dtype(d), sizes(std::move(s)) {
    std::int64_t count = 1;
    for (std::int64_t x : sizes) count *= x;
    bytes.resize(static_cast<std::size_t>(count) * attnkit::dtype_size(d));
    std::normal_distribution<float> normal(0.0f, spread);
    for (std::int64_t i = 0; i < count; ++i) set(i, normal(rng));
  }
  void set(std::int64_t i, float x) {
    switch (dtype) {
      case DType::f32: std::memcpy(bytes.data() + i * 4, &x, 4); break;
      case DType::bf16: { const attnkit::bfloat16 b = attnkit::to_bfloat16(x); std::memcpy(bytes.data() + i * 2, &b, 2); break; }
      case DType::f16: { const attnkit::float16 b = attnkit::to_float16(x); std::memcpy(bytes.data() + i * 2, &b, 2); break; }
      default: break;
    }
  }
  TensorView view() { return TensorView::contiguous(bytes.data(), dtype, sizes.data(), static_cast<int>(sizes.size())); }
  void hash_into(Hash& h) const { h.add(bytes.data(), bytes.size()); }
};

struct Shape {
  std::int64_t batch, q_heads, kv_heads, n, m, d_k, d_v;
};

// One forward (and optionally backward) call; the hash covers out, lse, probs and the gradients.
std::uint64_t attention_case(const Shape& s, DType dtype, attnkit::AttentionOptions options, bool with_probs,
                             bool with_backward, std::uint32_t seed, const std::function<void(Buffer&, Buffer&, Buffer&)>& edit = {}) {
  std::mt19937 rng(seed);
  Buffer q(dtype, {s.batch, s.q_heads, s.n, s.d_k}, rng), k(dtype, {s.batch, s.kv_heads, s.m, s.d_k}, rng),
      v(dtype, {s.batch, s.kv_heads, s.m, s.d_v}, rng);
  if (edit) edit(q, k, v);
  Buffer out(dtype, {s.batch, s.q_heads, s.n, s.d_v}, rng), lse(DType::f32, {s.batch, s.q_heads, s.n}, rng);
  Buffer probs(DType::f32, {s.batch, s.q_heads, s.n, with_probs ? s.m : 0}, rng);
  options.kernel = attnkit::Kernel::fast;
  attnkit::ForwardExtras extras;
  extras.lse = lse.view();
  if (with_probs) extras.probs = probs.view();
  attnkit::forward(q.view(), k.view(), v.view(), out.view(), options, extras);
  Hash h;
  out.hash_into(h);
  lse.hash_into(h);
  probs.hash_into(h);
  if (with_backward) {
    Buffer d_out(dtype, {s.batch, s.q_heads, s.n, s.d_v}, rng), dq(dtype, q.sizes, rng), dk(dtype, k.sizes, rng),
        dv(dtype, v.sizes, rng);
    attnkit::backward(q.view(), k.view(), v.view(), out.view(), d_out.view(), lse.view(), dq.view(), dk.view(), dv.view(),
                      options);
    dq.hash_into(h);
    dk.hash_into(h);
    dv.hash_into(h);
  }
  return h.h;
}

// Decoding over a KV cache of the given key and value storage (int8 and int4 read in place).
std::uint64_t cache_case(DType dtype, DType key_dtype, DType value_dtype, std::int64_t length, std::uint32_t seed) {
  std::mt19937 rng(seed);
  const std::int64_t kv_heads = 2, q_heads = 8, d = 128, n = 1;
  attnkit::KVCacheConfig config;
  config.num_kv_heads = kv_heads;
  config.head_dim = d;
  config.max_sequences = 2;
  config.max_sequence_length = 2048;
  config.dtype = dtype;
  config.key_dtype = key_dtype;
  config.value_dtype = value_dtype;
  attnkit::KVCache cache(config);
  std::vector<attnkit::KVCache::SequenceId> ids{cache.add_sequence(), cache.add_sequence()};
  for (std::int64_t b = 0; b < 2; ++b) {
    Buffer k(dtype, {kv_heads, length - 37 * b, d}, rng), v(dtype, {kv_heads, length - 37 * b, d}, rng);
    cache.append(ids[static_cast<std::size_t>(b)], k.view(), v.view());
  }
  Buffer q(dtype, {2, q_heads, n, d}, rng), out(dtype, {2, q_heads, n, d}, rng), lse(DType::f32, {2, q_heads, n}, rng);
  attnkit::CachedAttentionOptions options;
  options.kernel = attnkit::Kernel::fast;
  options.lse = lse.view();
  attnkit::attend(cache, ids, q.view(), out.view(), options);
  Hash h;
  out.hash_into(h);
  lse.hash_into(h);
  return h.h;
}

// AttentionOptions with `set` applied to the defaults.
template <class Set>
attnkit::AttentionOptions options(Set&& set) {
  attnkit::AttentionOptions o;
  set(o);
  return o;
}

void run_cases(const char* target, const char* only_case) {
  using attnkit::AttentionOptions;
  using attnkit::Causal;
  // Each case runs only if selected: the calls are wrapped so that an unselected one computes nothing.
  const auto print = [&](const char* name, auto&& run) {
    if (only_case != nullptr && std::strcmp(only_case, name) != 0) return;
    std::printf("%s %s %016llx\n", target, name, static_cast<unsigned long long>(run()));
  };
  const std::vector<float> slopes{0.5f, 0.25f, 0.125f, 0.0625f};
  const std::vector<std::int64_t> lengths{2, 50};
  const AttentionOptions plain;
  const AttentionOptions top_left = options([](AttentionOptions& o) { o.causal = Causal::top_left; });
  const AttentionOptions bottom_right = options([](AttentionOptions& o) { o.causal = Causal::bottom_right; });
  const AttentionOptions everything = options([&](AttentionOptions& o) {
    o.causal = Causal::top_left;
    o.window = {100, 7};
    o.alibi_slopes = slopes;
    o.softcap = 20.0;
    o.dropout_p = 0.2;
    o.seed = 7;
  });
  const AttentionOptions dropout = options([](AttentionOptions& o) {
    o.dropout_p = 0.3;
    o.seed = 3;
  });
  const AttentionOptions softcap = options([](AttentionOptions& o) { o.softcap = 30.0; });
  const AttentionOptions short_keys = options([&](AttentionOptions& o) { o.key_lengths = lengths; });
  const AttentionOptions short_keys_causal = options([&](AttentionOptions& o) {
    o.causal = Causal::bottom_right;
    o.key_lengths = lengths;
  });
  // Non-finite values in a key block: masked keys' values never reach the output.
  const auto poison = [](Buffer&, Buffer&, Buffer& v) {
    v.set(3, INFINITY);
    v.set(v.sizes[3] * 5 + 1, NAN);
  };
  // Large values: the overflow rescues of the forward and of the backward.
  const auto huge = [](Buffer& q, Buffer&, Buffer& v) {
    for (std::int64_t i = 0; i < 64; ++i) v.set(i, 3e38f);
    q.set(0, 1e3f);
  };
  const DType f32 = DType::f32, bf16 = DType::bf16, f16 = DType::f16;
  print("prefill_f32_causal", [&] { return attention_case({2, 4, 2, 37, 53, 64, 64}, f32, bottom_right, false, true, 1); });
  print("prefill_f32_options", [&] { return attention_case({1, 4, 1, 19, 300, 40, 24}, f32, everything, true, true, 2); });
  print("prefill_bf16_causal", [&] { return attention_case({1, 2, 2, 70, 70, 128, 128}, bf16, top_left, false, true, 3); });
  print("prefill_bf16_dropout", [&] { return attention_case({1, 2, 1, 33, 129, 64, 64}, bf16, dropout, false, true, 4); });
  print("prefill_f16_odd", [&] { return attention_case({1, 3, 1, 17, 41, 20, 36}, f16, plain, true, false, 5); });
  print("decode_f32_gqa4", [&] { return attention_case({2, 8, 2, 1, 1000, 128, 128}, f32, plain, false, false, 6); });
  print("decode_bf16_gqa4", [&] { return attention_case({1, 4, 1, 1, 777, 128, 128}, bf16, bottom_right, false, false, 7); });
  print("decode_f16_odd", [&] { return attention_case({1, 3, 1, 2, 301, 72, 40}, f16, softcap, false, false, 8); });
  print("decode_f32_long_split", [&] { return attention_case({1, 2, 1, 1, 20000, 64, 64}, f32, plain, false, false, 9); });
  print("prefill_f32_nonfinite_values",
        [&] { return attention_case({2, 2, 1, 40, 50, 32, 32}, f32, short_keys, false, false, 10, poison); });
  print("decode_bf16_nonfinite_values",
        [&] { return attention_case({2, 4, 1, 1, 50, 128, 128}, bf16, short_keys, false, false, 11, poison); });
  print("decode_f32_nonfinite_values",
        [&] { return attention_case({2, 4, 1, 1, 50, 64, 64}, f32, short_keys_causal, false, false, 12, poison); });
  print("prefill_f32_huge_values", [&] { return attention_case({1, 1, 1, 8, 64, 16, 16}, f32, plain, false, true, 13, huge); });
  print("cache_bf16", [&] { return cache_case(bf16, bf16, bf16, 600, 14); });
  print("cache_f32_int8", [&] { return cache_case(f32, DType::int8, DType::int8, 900, 15); });
  print("cache_f32_int4", [&] { return cache_case(f32, DType::int4, DType::int4, 333, 16); });
  print("cache_bf16_int8_int4", [&] { return cache_case(bf16, DType::int8, DType::int4, 1200, 17); });
}

}  // namespace

int main(int argc, char** argv) {
  const char* only_target = argc > 1 ? argv[1] : nullptr;
  const char* only_case = argc > 2 ? argv[2] : nullptr;
  attnkit::set_num_threads(2);  // split keys and work items as on the project's 2-core machines
  for (attnkit::Target target : attnkit::supported_targets()) {
    if (only_target != nullptr && std::strcmp(only_target, attnkit::target_name(target)) != 0) continue;
    attnkit::set_target(target);
    run_cases(attnkit::target_name(target), only_case);
  }
  return 0;
}
