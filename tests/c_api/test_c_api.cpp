// The C API (include/attnkit/attnkit.h, libattnkit_c) against the C++ API it wraps: the same
// results bit for bit for every option, strided descriptors, backward and the KV cache; each
// status code a C caller can meet, with a message that names the argument and outputs left as they
// were; the option structs' growth rule; the per-thread error message; the runtime settings.
// (test_c_api_status covers the status mapping itself; python/tests/test_c_api.py calls the library
// through ctypes against a numpy oracle.)
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "attnkit/attnkit.h"
#include "support/testing.hpp"

namespace attnkit::testing {
namespace {

attnkit_dtype c_dtype(DType dtype) {
  switch (dtype) {
    case DType::f64: return ATTNKIT_F64;
    case DType::f32: return ATTNKIT_F32;
    case DType::f16: return ATTNKIT_F16;
    case DType::bf16: return ATTNKIT_BF16;
    case DType::boolean: return ATTNKIT_BOOL;
    case DType::i32: return ATTNKIT_I32;
    case DType::i64: return ATTNKIT_I64;
    default: return -1;
  }
}

// A descriptor of a whole (contiguous) tensor.
attnkit_tensor describe(const Tensor& t) {
  attnkit_tensor d{};
  d.data = const_cast<void*>(t.raw());
  d.dtype = c_dtype(t.dtype());
  d.rank = static_cast<std::int32_t>(t.shape().size());
  std::int64_t stride = 1;
  for (int i = d.rank - 1; i >= 0; --i) {
    d.shape[i] = t.shape()[static_cast<std::size_t>(i)];
    d.strides[i] = stride;
    stride *= d.shape[i];
  }
  return d;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

struct Inputs {
  Tensor q, k, v;
};

Inputs random_inputs(Rng& rng, DType dtype, std::int64_t B = 2, std::int64_t Hq = 4, std::int64_t Hkv = 2,
                     std::int64_t n = 7, std::int64_t m = 11, std::int64_t d = 16, std::int64_t dv = 8) {
  return {random_tensor(rng, {B, Hq, n, d}, dtype), random_tensor(rng, {B, Hkv, m, d}, dtype),
          random_tensor(rng, {B, Hkv, m, dv}, dtype)};
}

// One option set in both APIs, with the memory the pointers refer to.
struct BothOptions {
  attnkit_options c{};
  AttentionOptions cpp;
  Tensor mask;
  attnkit_tensor mask_descriptor{};
  std::vector<std::int64_t> key_lengths;
  std::vector<float> slopes;
};

// Every option at once (`every`), or the defaults.
void fill_options(BothOptions& o, Rng& rng, bool every, Kernel kernel, DType dtype) {
  attnkit_options_init(&o.c);
  o.c.kernel = kernel == Kernel::reference ? ATTNKIT_KERNEL_REFERENCE : ATTNKIT_KERNEL_FAST;
  o.cpp.kernel = kernel;
  if (!every) return;
  o.mask = random_tensor(rng, {2, 1, 7, 11}, dtype);  // additive, broadcast over heads
  o.mask_descriptor = describe(o.mask);
  o.key_lengths = {9, 11};
  o.slopes = {0.5f, 0.25f, 0.125f, 0.0625f};
  o.c.scale = o.cpp.scale.emplace(0.3);
  o.c.causal = ATTNKIT_CAUSAL_BOTTOM_RIGHT;
  o.cpp.causal = Causal::bottom_right;
  o.c.window_left = o.cpp.window.left = 5;
  o.c.window_right = o.cpp.window.right = 1;
  o.c.mask = &o.mask_descriptor;
  o.cpp.mask = o.mask.view();
  o.c.key_lengths = o.key_lengths.data();
  o.c.key_lengths_count = 2;
  o.cpp.key_lengths = o.key_lengths;
  o.c.alibi_slopes = o.slopes.data();
  o.c.alibi_slopes_count = 4;
  o.cpp.alibi_slopes = o.slopes;
  o.c.softcap = o.cpp.softcap = 4.0;
  o.c.dropout_p = o.cpp.dropout_p = 0.25;
  o.c.seed = o.cpp.seed = 1234;
}

TEST(CApi, ForwardEqualsTheCppApiWithEveryOption) {
  ATTNKIT_TRACE_SEED();
  Rng rng(1);
  for (const auto& [dtype, kernel] : {std::pair{DType::f32, Kernel::fast}, std::pair{DType::f64, Kernel::reference},
                                      std::pair{DType::bf16, Kernel::fast}}) {
    for (bool every : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + (every ? ", every option" : ", defaults"));
      const Inputs in = random_inputs(rng, dtype);
      BothOptions o;
      fill_options(o, rng, every, kernel, dtype);
      Tensor out = poisoned(dtype, {2, 4, 7, 8}), lse = poisoned(DType::f32, {2, 4, 7});
      Tensor probs = poisoned(DType::f32, {2, 4, 7, 11});
      const attnkit_tensor q = describe(in.q), k = describe(in.k), v = describe(in.v), c_out = describe(out);
      const attnkit_tensor c_lse = describe(lse), c_probs = describe(probs);
      ASSERT_EQ(attnkit_forward(&q, &k, &v, &c_out, &o.c, &c_lse, &c_probs), ATTNKIT_OK) << attnkit_last_error_message();

      Tensor want = poisoned(dtype, {2, 4, 7, 8}), want_lse = poisoned(DType::f32, {2, 4, 7});
      Tensor want_probs = poisoned(DType::f32, {2, 4, 7, 11});
      forward(in.q.view(), in.k.view(), in.v.view(), want.view(), o.cpp, {want_lse.view(), want_probs.view()});
      EXPECT_TRUE(bitwise_equal(out, want));
      EXPECT_TRUE(bitwise_equal(lse, want_lse));
      EXPECT_TRUE(bitwise_equal(probs, want_probs));
      EXPECT_FALSE(has_nan(out));
    }
  }
}

TEST(CApi, NullOptionsAndExtrasMeanTheDefaults) {
  ATTNKIT_TRACE_SEED();
  Rng rng(2);
  const Inputs in = random_inputs(rng, DType::f32, 1, 2, 2, 5, 5, 8, 8);
  Tensor out = poisoned(DType::f32, {1, 2, 5, 8});
  const attnkit_tensor q = describe(in.q), k = describe(in.k), v = describe(in.v), c_out = describe(out);
  ASSERT_EQ(attnkit_forward(&q, &k, &v, &c_out, nullptr, nullptr, nullptr), ATTNKIT_OK);
  EXPECT_TRUE(bitwise_equal(out, run_forward(in.q, in.k, in.v, {}, DType::f32).out));
}

// q and out laid out [B, n, H, d] in memory, described in the logical order through strides.
TEST(CApi, StridedDescriptorsReadAndWriteInPlace) {
  ATTNKIT_TRACE_SEED();
  Rng rng(3);
  const std::int64_t B = 2, H = 3, n = 6, d = 8;
  const Tensor q_bnhd = random_tensor(rng, {B, n, H, d}, DType::f32);
  const Inputs in = random_inputs(rng, DType::f32, B, H, H, n, n, d, d);
  Tensor out_bnhd = poisoned(DType::f32, {B, n, H, d});
  auto permuted = [&](const Tensor& t) {
    attnkit_tensor x = describe(t);
    std::swap(x.shape[1], x.shape[2]);
    std::swap(x.strides[1], x.strides[2]);
    return x;
  };
  const attnkit_tensor q = permuted(q_bnhd), c_out = permuted(out_bnhd), k = describe(in.k), v = describe(in.v);
  attnkit_options options;
  attnkit_options_init(&options);
  options.causal = ATTNKIT_CAUSAL_TOP_LEFT;
  ASSERT_EQ(attnkit_forward(&q, &k, &v, &c_out, &options, nullptr, nullptr), ATTNKIT_OK) << attnkit_last_error_message();

  Tensor want = poisoned(DType::f32, {B, n, H, d});
  AttentionOptions cpp;
  cpp.causal = Causal::top_left;
  forward(q_bnhd.view().permuted({0, 2, 1, 3}), in.k.view(), in.v.view(), want.view().permuted({0, 2, 1, 3}), cpp);
  EXPECT_TRUE(bitwise_equal(out_bnhd, want));
}

TEST(CApi, BackwardEqualsTheCppApi) {
  ATTNKIT_TRACE_SEED();
  Rng rng(4);
  for (bool every : {false, true}) {
    const Inputs in = random_inputs(rng, DType::f32);
    BothOptions o;
    fill_options(o, rng, every, Kernel::fast, DType::f32);
    Tensor out(DType::f32, {2, 4, 7, 8}), lse(DType::f32, {2, 4, 7});
    forward(in.q.view(), in.k.view(), in.v.view(), out.view(), o.cpp, {lse.view(), std::nullopt});
    const Tensor d_out = random_tensor(rng, {2, 4, 7, 8}, DType::f32);
    Tensor dq = poisoned(DType::f32, {2, 4, 7, 16}), dk = poisoned(DType::f32, {2, 2, 11, 16});
    Tensor dv = poisoned(DType::f32, {2, 2, 11, 8});
    const attnkit_tensor q = describe(in.q), k = describe(in.k), v = describe(in.v), c_out = describe(out);
    const attnkit_tensor c_d_out = describe(d_out), c_lse = describe(lse), c_dq = describe(dq), c_dk = describe(dk),
                         c_dv = describe(dv);
    ASSERT_EQ(attnkit_backward(&q, &k, &v, &c_out, &c_d_out, &c_lse, &c_dq, &c_dk, &c_dv, &o.c), ATTNKIT_OK)
        << attnkit_last_error_message();
    Tensor want_dq(DType::f32, {2, 4, 7, 16}), want_dk(DType::f32, {2, 2, 11, 16}), want_dv(DType::f32, {2, 2, 11, 8});
    backward(in.q.view(), in.k.view(), in.v.view(), out.view(), d_out.view(), lse.view(), want_dq.view(),
             want_dk.view(), want_dv.view(), o.cpp);
    EXPECT_TRUE(bitwise_equal(dq, want_dq) && bitwise_equal(dk, want_dk) && bitwise_equal(dv, want_dv));
  }
}

// ---- errors ------------------------------------------------------------------------------------

struct Failure {
  std::string what;
  attnkit_status expected;
  std::string named;  // a part of the message
};

// Runs a forward that `spoil` makes wrong: the status, its name, the message and the untouched
// (still NaN) outputs.
void expect_forward_failure(const Failure& f, const std::function<void(attnkit_tensor&, attnkit_tensor&, attnkit_tensor&,
                                                                       attnkit_tensor&, attnkit_options&)>& spoil) {
  SCOPED_TRACE(f.what);
  Rng rng(5);
  const Inputs in = random_inputs(rng, DType::f32);
  Tensor out = poisoned(DType::f32, {2, 4, 7, 8}), lse = poisoned(DType::f32, {2, 4, 7});
  attnkit_tensor q = describe(in.q), k = describe(in.k), v = describe(in.v), c_out = describe(out);
  const attnkit_tensor c_lse = describe(lse);
  attnkit_options options;
  attnkit_options_init(&options);
  spoil(q, k, v, c_out, options);
  const attnkit_status status = attnkit_forward(&q, &k, &v, &c_out, &options, &c_lse, nullptr);
  EXPECT_EQ(status, f.expected) << attnkit_status_name(status) << ": " << attnkit_last_error_message();
  EXPECT_TRUE(contains(attnkit_last_error_message(), f.named)) << attnkit_last_error_message();
  EXPECT_TRUE(all_nan(out)) << "an output was written by a failed call";
  EXPECT_TRUE(all_nan(lse)) << "lse was written by a failed call";
}

TEST(CApiErrors, ForwardStatusesNameTheArgument) {
  using T = attnkit_tensor;
  using O = attnkit_options;
  expect_forward_failure({"a negative scale", ATTNKIT_INVALID_ARGUMENT, "scale"},
                         [](T&, T&, T&, T&, O& o) { o.scale = -1.0; });
  expect_forward_failure({"a causal mode that does not exist", ATTNKIT_INVALID_ARGUMENT, "options.causal: 7"},
                         [](T&, T&, T&, T&, O& o) { o.causal = 7; });
  expect_forward_failure({"dropout of 1", ATTNKIT_INVALID_ARGUMENT, "dropout"},
                         [](T&, T&, T&, T&, O& o) { o.dropout_p = 1.0; });
  expect_forward_failure({"key lengths without their array", ATTNKIT_NULL_POINTER, "options.key_lengths"},
                         [](T&, T&, T&, T&, O& o) { o.key_lengths_count = 2; });
  expect_forward_failure({"k of another batch size", ATTNKIT_INVALID_SHAPE, "k"},
                         [](T&, T& k, T&, T&, O&) { k.shape[0] = 1; });
  expect_forward_failure({"rank 5", ATTNKIT_INVALID_SHAPE, "q: rank 5"}, [](T& q, T&, T&, T&, O&) { q.rank = 5; });
  expect_forward_failure({"a dtype that does not exist", ATTNKIT_INVALID_DTYPE, "v: dtype 42"},
                         [](T&, T&, T& v, T&, O&) { v.dtype = 42; });
  expect_forward_failure({"int8 q", ATTNKIT_INVALID_DTYPE, "q: int8 is a KV cache storage format"},
                         [](T& q, T&, T&, T&, O&) { q.dtype = ATTNKIT_INT8; });
  expect_forward_failure({"q of f64 with f32 k", ATTNKIT_INVALID_DTYPE, "q"},
                         [](T& q, T&, T&, T&, O&) { q.dtype = ATTNKIT_F64; });
  expect_forward_failure({"no data for a non-empty k", ATTNKIT_NULL_POINTER, "k"},
                         [](T&, T& k, T&, T&, O&) { k.data = nullptr; });
  expect_forward_failure({"out over q", ATTNKIT_OVERLAP, "out"}, [](T& q, T&, T&, T& out, O&) {
    out.data = q.data;  // q is [2, 4, 7, 16] floats: room for out's [2, 4, 7, 8]
  });
  expect_forward_failure({"sizes whose product overflows", ATTNKIT_SIZE_OVERFLOW, "q"}, [](T& q, T&, T&, T&, O&) {
    q.shape[0] = std::int64_t{1} << 40;
    q.shape[2] = std::int64_t{1} << 40;
  });
  expect_forward_failure({"the fast kernel on f64", ATTNKIT_UNSUPPORTED, "kernel"}, [](T& q, T& k, T& v, T& out, O& o) {
    q.dtype = k.dtype = v.dtype = out.dtype = ATTNKIT_F64;  // the memory is not read: the call is refused first
    o.kernel = ATTNKIT_KERNEL_FAST;
  });
  expect_forward_failure({"a negative rank", ATTNKIT_INVALID_SHAPE, "q: rank -1"}, [](T& q, T&, T&, T&, O&) { q.rank = -1; });
}

TEST(CApiErrors, NullDescriptorsAndEmptySizes) {
  EXPECT_EQ(attnkit_forward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr), ATTNKIT_NULL_POINTER);
  EXPECT_TRUE(contains(attnkit_last_error_message(), "q: the tensor descriptor is NULL"));
  // Empty sizes are valid, with or without data.
  const Tensor q(DType::f32, {1, 2, 0, 4}), k(DType::f32, {1, 2, 3, 4}), v(DType::f32, {1, 2, 3, 4});
  Tensor out(DType::f32, {1, 2, 0, 4});
  attnkit_tensor cq = describe(q), ck = describe(k), cv = describe(v), cout = describe(out);
  cq.data = cout.data = nullptr;
  EXPECT_EQ(attnkit_forward(&cq, &ck, &cv, &cout, nullptr, nullptr, nullptr), ATTNKIT_OK) << attnkit_last_error_message();
}

// The option structs grow at their end: struct_size says how much the caller knows.
TEST(CApiErrors, StructSizeRule) {
  Rng rng(6);
  const Inputs in = random_inputs(rng, DType::f32);
  Tensor out(DType::f32, {2, 4, 7, 8});
  const attnkit_tensor q = describe(in.q), k = describe(in.k), v = describe(in.v), c_out = describe(out);
  struct Newer {
    attnkit_options known;
    std::uint64_t added_later;
  } newer{};
  attnkit_options_init(&newer.known);
  newer.known.struct_size = sizeof(Newer);
  EXPECT_EQ(attnkit_forward(&q, &k, &v, &c_out, &newer.known, nullptr, nullptr), ATTNKIT_OK)
      << "a newer caller's zero fields mean 'as before': " << attnkit_last_error_message();
  newer.added_later = 1;
  EXPECT_EQ(attnkit_forward(&q, &k, &v, &c_out, &newer.known, nullptr, nullptr), ATTNKIT_UNSUPPORTED);
  EXPECT_TRUE(contains(attnkit_last_error_message(), "beyond the")) << attnkit_last_error_message();

  attnkit_options zeroed{};
  EXPECT_EQ(attnkit_forward(&q, &k, &v, &c_out, &zeroed, nullptr, nullptr), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(attnkit_last_error_message(), "options.struct_size is 0: initialise the struct with "
                                                     "attnkit_options_init"));
  attnkit_options shorter;
  attnkit_options_init(&shorter);
  shorter.struct_size = 16;
  EXPECT_EQ(attnkit_forward(&q, &k, &v, &c_out, &shorter, nullptr, nullptr), ATTNKIT_INVALID_ARGUMENT);
}

// Attention sinks through the C API: forward, the backward with their gradient, and attention over a
// cache give the C++ calls' bits; a caller built against the struct before sinks (struct_size ending
// at seed) gets none.
TEST(CApi, SinksGiveTheCppResultsAndAnOlderStructHasNone) {
  Rng rng(67);
  const Tensor q = random_tensor(rng, {1, 4, 5, 8}, DType::f32), d_out = random_tensor(rng, {1, 4, 5, 6}, DType::f32);
  const Tensor k3 = random_tensor(rng, {2, 7, 8}, DType::f32), v3 = random_tensor(rng, {2, 7, 6}, DType::f32);
  Tensor k(DType::f32, {1, 2, 7, 8}), v(DType::f32, {1, 2, 7, 6});  // the same values, with a batch of 1
  std::copy_n(k3.data<float>(), k3.numel(), k.data<float>());
  std::copy_n(v3.data<float>(), v3.numel(), v.data<float>());
  const float sinks[] = {0.5f, -1.0f, 2.0f, 3.0f};
  AttentionOptions cpp_options;
  cpp_options.sinks = sinks;
  Tensor want = poisoned(DType::f32, {1, 4, 5, 6}), want_lse = poisoned(DType::f32, {1, 4, 5});
  forward(q.view(), k.view(), v.view(), want.view(), cpp_options, {want_lse.view()});
  Tensor want_dq = poisoned(DType::f32, {1, 4, 5, 8}), want_dk = poisoned(DType::f32, {1, 2, 7, 8});
  Tensor want_dv = poisoned(DType::f32, {1, 2, 7, 6}), want_d_sinks = poisoned(DType::f32, {4});
  backward(q.view(), k.view(), v.view(), want.view(), d_out.view(), want_lse.view(), want_dq.view(), want_dk.view(),
           want_dv.view(), cpp_options, BackwardExtras{want_d_sinks.view()});

  attnkit_options o;
  attnkit_options_init(&o);
  EXPECT_EQ(o.sinks, nullptr);
  EXPECT_EQ(o.sinks_count, 0);
  o.sinks = sinks, o.sinks_count = 4;
  Tensor out = poisoned(DType::f32, {1, 4, 5, 6}), lse = poisoned(DType::f32, {1, 4, 5});
  const attnkit_tensor cq = describe(q), ck = describe(k), cv = describe(v), c_out = describe(out), c_lse = describe(lse);
  ASSERT_EQ(attnkit_forward(&cq, &ck, &cv, &c_out, &o, &c_lse, nullptr), ATTNKIT_OK) << attnkit_last_error_message();
  EXPECT_TRUE(bitwise_equal(out, want));
  EXPECT_TRUE(bitwise_equal(lse, want_lse));
  Tensor dq = poisoned(DType::f32, {1, 4, 5, 8}), dk = poisoned(DType::f32, {1, 2, 7, 8});
  Tensor dv = poisoned(DType::f32, {1, 2, 7, 6}), d_sinks = poisoned(DType::f32, {4});
  const attnkit_tensor c_d_out = describe(d_out), c_dq = describe(dq), c_dk = describe(dk), c_dv = describe(dv);
  const attnkit_tensor c_d_sinks = describe(d_sinks);
  ASSERT_EQ(attnkit_backward_with_sinks(&cq, &ck, &cv, &c_out, &c_d_out, &c_lse, &c_dq, &c_dk, &c_dv, &o, &c_d_sinks),
            ATTNKIT_OK) << attnkit_last_error_message();
  EXPECT_TRUE(bitwise_equal(dq, want_dq) && bitwise_equal(dk, want_dk) && bitwise_equal(dv, want_dv));
  EXPECT_TRUE(bitwise_equal(d_sinks, want_d_sinks));
  o.sinks_count = 3;
  EXPECT_EQ(attnkit_forward(&cq, &ck, &cv, &c_out, &o, nullptr, nullptr), ATTNKIT_INVALID_SHAPE);
  EXPECT_TRUE(contains(attnkit_last_error_message(), "sinks")) << attnkit_last_error_message();
  o.sinks = nullptr, o.sinks_count = 4;
  EXPECT_EQ(attnkit_forward(&cq, &ck, &cv, &c_out, &o, nullptr, nullptr), ATTNKIT_NULL_POINTER);

  // The struct before sinks: the bytes past seed are never read, so the call is the plain softmax.
  o.sinks = sinks, o.sinks_count = 4;
  o.struct_size = offsetof(attnkit_options, sinks);
  ASSERT_EQ(attnkit_forward(&cq, &ck, &cv, &c_out, &o, nullptr, nullptr), ATTNKIT_OK) << attnkit_last_error_message();
  Tensor plain = poisoned(DType::f32, {1, 4, 5, 6});
  forward(q.view(), k.view(), v.view(), plain.view());
  EXPECT_TRUE(bitwise_equal(out, plain));
  EXPECT_FALSE(bitwise_equal(plain, want));

  // Attention over a cache with sinks, as the C++ attend.
  attnkit_kv_cache_config config;
  attnkit_kv_cache_config_init(&config);
  config.num_kv_heads = 2, config.head_dim = 8, config.value_dim = 6, config.max_sequence_length = 7;
  attnkit_kv_cache* cache = nullptr;
  ASSERT_EQ(attnkit_kv_cache_create(&config, &cache), ATTNKIT_OK) << attnkit_last_error_message();
  std::int64_t id = 0;
  ASSERT_EQ(attnkit_kv_cache_add_sequence(cache, &id), ATTNKIT_OK);
  const attnkit_tensor ck3 = describe(k3), cv3 = describe(v3);
  ASSERT_EQ(attnkit_kv_cache_append(cache, &id, 1, &ck3, &cv3), ATTNKIT_OK) << attnkit_last_error_message();
  attnkit_attend_options ao;
  attnkit_attend_options_init(&ao);
  ao.sinks = sinks, ao.sinks_count = 4;
  Tensor cached = poisoned(DType::f32, {1, 4, 5, 6});
  const attnkit_tensor c_cached = describe(cached);
  ASSERT_EQ(attnkit_kv_cache_attend(cache, &id, 1, &cq, &c_cached, &ao, nullptr), ATTNKIT_OK) << attnkit_last_error_message();
  attnkit_kv_cache_destroy(cache);
  KVCache cpp(KVCacheConfig{2, 8, 6, 1, 7});
  const KVCache::SequenceId cpp_id = cpp.add_sequence();
  cpp.append(cpp_id, k3.view(), v3.view());
  CachedAttentionOptions cached_options;
  cached_options.sinks = sinks;
  Tensor cached_want = poisoned(DType::f32, {1, 4, 5, 6});
  attend(cpp, std::vector<KVCache::SequenceId>{cpp_id}, q.view(), cached_want.view(), cached_options);
  EXPECT_TRUE(bitwise_equal(cached, cached_want));
}

// A caller built against the first attnkit_kv_cache_config, which ended before key_quantization,
// passes its smaller struct_size: the added field reads as its default, keys per token. Each C cache
// attends bit for bit as the C++ KVCache of the same KeyQuantization does, and the two differ.
TEST(CApiKVCache, AFirstVersionConfigIsReadWithTheAddedFieldsDefaults) {
  Rng rng(61);
  const Tensor k = random_tensor(rng, {1, 70, 32}, DType::f32), v = random_tensor(rng, {1, 70, 32}, DType::f32);
  const Tensor q = random_tensor(rng, {1, 2, 1, 32}, DType::f32);
  std::vector<Tensor> outputs;
  for (attnkit_key_quantization keys : {ATTNKIT_KEYS_PER_TOKEN, ATTNKIT_KEYS_PER_CHANNEL}) {
    SCOPED_TRACE(keys == ATTNKIT_KEYS_PER_TOKEN ? "a first-version struct" : "keys per channel");
    attnkit_kv_cache_config config;
    attnkit_kv_cache_config_init(&config);
    EXPECT_EQ(config.key_quantization, ATTNKIT_KEYS_PER_TOKEN);
    config.num_kv_heads = 1, config.head_dim = 32, config.max_sequence_length = 70, config.dtype = ATTNKIT_INT4;
    config.key_quantization = keys;
    if (keys == ATTNKIT_KEYS_PER_TOKEN) {
      config.struct_size = offsetof(attnkit_kv_cache_config, key_quantization);
      config.key_quantization = 77;  // past the caller's struct: never read
    }
    attnkit_kv_cache* cache = nullptr;
    ASSERT_EQ(attnkit_kv_cache_create(&config, &cache), ATTNKIT_OK) << attnkit_last_error_message();
    std::int64_t id = 0;
    ASSERT_EQ(attnkit_kv_cache_add_sequence(cache, &id), ATTNKIT_OK);
    const attnkit_tensor ck = describe(k), cv = describe(v), cq = describe(q);
    ASSERT_EQ(attnkit_kv_cache_append(cache, &id, 1, &ck, &cv), ATTNKIT_OK) << attnkit_last_error_message();
    Tensor out = poisoned(DType::f32, {1, 2, 1, 32});
    const attnkit_tensor c_out = describe(out);
    ASSERT_EQ(attnkit_kv_cache_attend(cache, &id, 1, &cq, &c_out, nullptr, nullptr), ATTNKIT_OK) << attnkit_last_error_message();
    attnkit_kv_cache_destroy(cache);

    KVCacheConfig same{1, 32, 32, 1, 70, KVCacheLayout::contiguous, 16, 0, DType::int4};
    same.key_quantization = keys == ATTNKIT_KEYS_PER_TOKEN ? KeyQuantization::per_token : KeyQuantization::per_channel;
    KVCache cpp(same);
    const KVCache::SequenceId cpp_id = cpp.add_sequence();
    cpp.append(cpp_id, k.view(), v.view());
    Tensor want = poisoned(DType::f32, {1, 2, 1, 32});
    attend(cpp, std::vector<KVCache::SequenceId>{cpp_id}, q.view(), want.view());
    EXPECT_TRUE(bitwise_equal(out, want));
    outputs.push_back(std::move(out));
  }
  EXPECT_FALSE(bitwise_equal(outputs[0], outputs[1])) << "the key quantisations differ, so must the outputs";
}

// A struct placed just before memory that cannot be read: a struct_size past ATTNKIT_MAX_STRUCT_SIZE
// is refused by name before any byte beyond the known struct is read (a crash otherwise), and the
// output is left as it was.
TEST(CApiErrors, StructSizeIsBoundedSoNothingPastTheStructIsRead) {
  const long page = sysconf(_SC_PAGESIZE);
  void* pages = mmap(nullptr, static_cast<std::size_t>(2 * page), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(pages, MAP_FAILED);
  ASSERT_EQ(mprotect(static_cast<char*>(pages) + page, static_cast<std::size_t>(page), PROT_NONE), 0);
  char* end_of_readable = static_cast<char*>(pages) + page;
  Rng rng(60);
  const Inputs in = random_inputs(rng, DType::f32);
  Tensor out = poisoned(DType::f32, {2, 4, 7, 8});
  const attnkit_tensor q = describe(in.q), k = describe(in.k), v = describe(in.v), c_out = describe(out);
  for (std::size_t size : {std::size_t{ATTNKIT_MAX_STRUCT_SIZE + 1}, std::size_t{1} << 20, SIZE_MAX}) {
    SCOPED_TRACE("struct_size " + std::to_string(size));
    auto* options = reinterpret_cast<attnkit_options*>(end_of_readable - sizeof(attnkit_options));
    attnkit_options_init(options);
    options->struct_size = size;
    EXPECT_EQ(attnkit_forward(&q, &k, &v, &c_out, options, nullptr, nullptr), ATTNKIT_INVALID_ARGUMENT);
    EXPECT_TRUE(contains(attnkit_last_error_message(), "options.struct_size " + std::to_string(size) +
                                                           " exceeds ATTNKIT_MAX_STRUCT_SIZE"))
        << attnkit_last_error_message();
    EXPECT_TRUE(all_nan(out)) << "a failed call wrote its output";
    auto* config = reinterpret_cast<attnkit_kv_cache_config*>(end_of_readable - sizeof(attnkit_kv_cache_config));
    attnkit_kv_cache_config_init(config);
    config->struct_size = size;
    attnkit_kv_cache* cache = nullptr;
    EXPECT_EQ(attnkit_kv_cache_create(config, &cache), ATTNKIT_INVALID_ARGUMENT);
    EXPECT_TRUE(contains(attnkit_last_error_message(), "config.struct_size")) << attnkit_last_error_message();
    EXPECT_EQ(cache, nullptr);
  }
  munmap(pages, static_cast<std::size_t>(2 * page));
}

// Window sides up to INT64_MAX through the C API: "unbounded", the same bits as −1.
TEST(CApi, WindowSidesUpToInt64MaxMeanUnbounded) {
  Rng rng(61);
  const Inputs in = random_inputs(rng, DType::f32);
  const attnkit_tensor q = describe(in.q), k = describe(in.k), v = describe(in.v);
  for (attnkit_causal causal : {ATTNKIT_CAUSAL_NONE, ATTNKIT_CAUSAL_BOTTOM_RIGHT}) {
    for (attnkit_kernel kernel : {ATTNKIT_KERNEL_FAST, ATTNKIT_KERNEL_REFERENCE}) {
      Tensor unbounded = poisoned(DType::f32, {2, 4, 7, 8}), huge = poisoned(DType::f32, {2, 4, 7, 8});
      const attnkit_tensor c_unbounded = describe(unbounded), c_huge = describe(huge);
      attnkit_options options;
      attnkit_options_init(&options);
      options.causal = causal;
      options.kernel = kernel;
      options.window_left = 2;
      ASSERT_EQ(attnkit_forward(&q, &k, &v, &c_unbounded, &options, nullptr, nullptr), ATTNKIT_OK) << attnkit_last_error_message();
      options.window_right = std::numeric_limits<std::int64_t>::max();
      ASSERT_EQ(attnkit_forward(&q, &k, &v, &c_huge, &options, nullptr, nullptr), ATTNKIT_OK) << attnkit_last_error_message();
      EXPECT_EQ(std::memcmp(unbounded.raw(), huge.raw(), static_cast<std::size_t>(unbounded.numel()) * sizeof(float)), 0);
    }
  }
}

TEST(CApiErrors, LastErrorMessageIsPerThread) {
  EXPECT_EQ(attnkit_set_num_threads(1 << 20), ATTNKIT_INVALID_ARGUMENT);
  const std::string mine = attnkit_last_error_message();
  EXPECT_FALSE(mine.empty());
  std::string fresh, theirs;
  std::thread([&] {
    fresh = attnkit_last_error_message();
    attnkit_set_target("no such target");
    theirs = attnkit_last_error_message();
  }).join();
  EXPECT_EQ(fresh, "");
  EXPECT_TRUE(contains(theirs, "target: 'no such target' is not a target")) << theirs;
  EXPECT_EQ(attnkit_last_error_message(), mine);
  // A success leaves the last failure's message.
  EXPECT_EQ(attnkit_set_num_threads(0), ATTNKIT_OK);
  EXPECT_EQ(attnkit_last_error_message(), mine);
}

// ---- the KV cache ------------------------------------------------------------------------------

TEST(CApiKVCache, EqualsTheCppCache) {
  ATTNKIT_TRACE_SEED();
  Rng rng(7);
  for (attnkit_dtype storage : {ATTNKIT_F32, ATTNKIT_BF16, ATTNKIT_INT8}) {
    SCOPED_TRACE("storage " + std::to_string(storage));
    const std::int64_t Hkv = 2, Hq = 4, d = 32;
    attnkit_kv_cache_config config;
    attnkit_kv_cache_config_init(&config);
    config.num_kv_heads = Hkv;
    config.head_dim = d;
    config.max_sequences = 2;
    config.max_sequence_length = 40;
    config.layout = ATTNKIT_KV_CACHE_PAGED;
    config.block_size = 8;
    config.dtype = storage;
    attnkit_kv_cache* cache = nullptr;
    ASSERT_EQ(attnkit_kv_cache_create(&config, &cache), ATTNKIT_OK) << attnkit_last_error_message();

    KVCacheConfig cpp_config;
    cpp_config.num_kv_heads = Hkv;
    cpp_config.head_dim = d;
    cpp_config.max_sequences = 2;
    cpp_config.max_sequence_length = 40;
    cpp_config.layout = KVCacheLayout::paged;
    cpp_config.block_size = 8;
    cpp_config.dtype = storage == ATTNKIT_F32 ? DType::f32 : storage == ATTNKIT_BF16 ? DType::bf16 : DType::int8;
    KVCache want(cpp_config);

    std::int64_t a = -1, b = -1;
    ASSERT_EQ(attnkit_kv_cache_add_sequence(cache, &a), ATTNKIT_OK);
    ASSERT_EQ(attnkit_kv_cache_add_sequence(cache, &b), ATTNKIT_OK);
    const std::int64_t wa = want.add_sequence(), wb = want.add_sequence();
    // A prompt of 13 tokens for a alone (rank 3), then 3 steps of one token for both (rank 4).
    const Tensor prompt_k = random_tensor(rng, {Hkv, 13, d}, DType::f32), prompt_v = random_tensor(rng, {Hkv, 13, d}, DType::f32);
    attnkit_tensor ck = describe(prompt_k), cv = describe(prompt_v);
    ASSERT_EQ(attnkit_kv_cache_append(cache, &a, 1, &ck, &cv), ATTNKIT_OK) << attnkit_last_error_message();
    want.append(wa, prompt_k.view(), prompt_v.view());
    for (int step = 0; step < 3; ++step) {
      const Tensor k = random_tensor(rng, {2, Hkv, 1, d}, DType::f32), v = random_tensor(rng, {2, Hkv, 1, d}, DType::f32);
      ck = describe(k);
      cv = describe(v);
      const std::int64_t both[2] = {a, b}, want_both[2] = {wa, wb};
      ASSERT_EQ(attnkit_kv_cache_append(cache, both, 2, &ck, &cv), ATTNKIT_OK) << attnkit_last_error_message();
      want.append(want_both, k.view(), v.view());

      const Tensor q = random_tensor(rng, {2, Hq, 1, d}, DType::f32);
      Tensor out = poisoned(DType::f32, {2, Hq, 1, d}), lse = poisoned(DType::f32, {2, Hq, 1});
      const attnkit_tensor cq = describe(q), cout = describe(out), clse = describe(lse);
      attnkit_attend_options options;
      attnkit_attend_options_init(&options);
      options.softcap = 5.0;
      options.window_left = 9;
      ASSERT_EQ(attnkit_kv_cache_attend(cache, both, 2, &cq, &cout, &options, &clse), ATTNKIT_OK)
          << attnkit_last_error_message();
      Tensor want_out(DType::f32, {2, Hq, 1, d}), want_lse(DType::f32, {2, Hq, 1});
      CachedAttentionOptions cpp_options;
      cpp_options.softcap = 5.0;
      cpp_options.window.left = 9;
      cpp_options.lse = want_lse.view();
      attend(want, want_both, q.view(), want_out.view(), cpp_options);
      EXPECT_TRUE(bitwise_equal(out, want_out) && bitwise_equal(lse, want_lse));
    }
    std::int64_t length = 0, room = 0;
    ASSERT_EQ(attnkit_kv_cache_length(cache, a, &length), ATTNKIT_OK);
    EXPECT_EQ(length, 16);
    ASSERT_EQ(attnkit_kv_cache_room(cache, b, &room), ATTNKIT_OK);
    EXPECT_EQ(room, want.room(wb));
    ASSERT_EQ(attnkit_kv_cache_free_sequence(cache, a), ATTNKIT_OK);
    EXPECT_EQ(attnkit_kv_cache_length(cache, a, &length), ATTNKIT_INVALID_ARGUMENT);
    attnkit_kv_cache_destroy(cache);
  }
  attnkit_kv_cache_destroy(nullptr);  // ignored
}

TEST(CApiKVCache, ErrorsNameTheArgument) {
  attnkit_kv_cache_config config;
  attnkit_kv_cache_config_init(&config);
  config.num_kv_heads = 8;
  config.head_dim = 128;
  config.max_sequence_length = 65536;
  attnkit_kv_cache* cache = nullptr;
  // Out of memory: 256 MiB of keys over a budget of 1 MiB; refused before anything is allocated.
  ASSERT_EQ(attnkit_set_memory_limit(1 << 20), ATTNKIT_OK);
  EXPECT_EQ(attnkit_kv_cache_create(&config, &cache), ATTNKIT_OUT_OF_MEMORY);
  EXPECT_TRUE(contains(attnkit_last_error_message(), "set_memory_limit")) << attnkit_last_error_message();
  EXPECT_EQ(cache, nullptr);
  ASSERT_EQ(attnkit_set_memory_limit(0), ATTNKIT_OK);

  config.max_sequence_length = 8;
  config.dtype = ATTNKIT_INT4;
  config.head_dim = 20;  // int4 storage needs multiples of 32
  EXPECT_EQ(attnkit_kv_cache_create(&config, &cache), ATTNKIT_INVALID_SHAPE);
  EXPECT_TRUE(contains(attnkit_last_error_message(), "32")) << attnkit_last_error_message();
  config.dtype = ATTNKIT_FP8_E4M3;  // so does fp8 storage
  EXPECT_EQ(attnkit_kv_cache_create(&config, &cache), ATTNKIT_INVALID_SHAPE);
  EXPECT_TRUE(contains(attnkit_last_error_message(), "fp8_e4m3")) << attnkit_last_error_message();
  config.dtype = 11;
  EXPECT_EQ(attnkit_kv_cache_create(&config, &cache), ATTNKIT_INVALID_DTYPE);
  EXPECT_TRUE(contains(attnkit_last_error_message(), "ATTNKIT_FP8_E5M2 = 10")) << attnkit_last_error_message();
  config.dtype = ATTNKIT_FP8_E5M2;
  config.head_dim = 32;
  config.layout = 5;
  EXPECT_EQ(attnkit_kv_cache_create(&config, &cache), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(attnkit_last_error_message(), "config.layout: 5"));
  config.layout = ATTNKIT_KV_CACHE_CONTIGUOUS;
  config.key_quantization = 2;
  EXPECT_EQ(attnkit_kv_cache_create(&config, &cache), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(attnkit_last_error_message(), "config.key_quantization: 2")) << attnkit_last_error_message();
  config.key_quantization = ATTNKIT_KEYS_PER_CHANNEL;  // fp8 keys are per token only
  EXPECT_EQ(attnkit_kv_cache_create(&config, &cache), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(attnkit_last_error_message(), "per_channel quantises int8 or int4 keys")) << attnkit_last_error_message();
  config.key_quantization = ATTNKIT_KEYS_PER_TOKEN;
  EXPECT_EQ(attnkit_kv_cache_create(nullptr, &cache), ATTNKIT_NULL_POINTER);
  ASSERT_EQ(attnkit_kv_cache_create(&config, &cache), ATTNKIT_OK) << attnkit_last_error_message();

  // Capacity: one sequence at most, of 8 tokens.
  std::int64_t a = 0, b = 0;
  ASSERT_EQ(attnkit_kv_cache_add_sequence(cache, &a), ATTNKIT_OK);
  EXPECT_EQ(attnkit_kv_cache_add_sequence(cache, &b), ATTNKIT_CAPACITY_EXCEEDED);
  const Tensor k(DType::f32, {8, 9, 32}), v(DType::f32, {8, 9, 32});
  const attnkit_tensor ck = describe(k), cv = describe(v);
  EXPECT_EQ(attnkit_kv_cache_append(cache, &a, 1, &ck, &cv), ATTNKIT_CAPACITY_EXCEEDED);
  std::int64_t length = -1;
  ASSERT_EQ(attnkit_kv_cache_length(cache, a, &length), ATTNKIT_OK);
  EXPECT_EQ(length, 0) << "a failed append appends nothing";
  EXPECT_EQ(attnkit_kv_cache_append(cache, nullptr, 1, &ck, &cv), ATTNKIT_NULL_POINTER);
  EXPECT_TRUE(contains(attnkit_last_error_message(), "sequences"));
  EXPECT_EQ(attnkit_kv_cache_add_sequence(nullptr, &b), ATTNKIT_NULL_POINTER);
  EXPECT_TRUE(contains(attnkit_last_error_message(), "cache: NULL"));
  attnkit_kv_cache_destroy(cache);
}

// ---- the runtime -------------------------------------------------------------------------------

TEST(CApiRuntime, VersionThreadsAndTargets) {
  EXPECT_STREQ(attnkit_version(), version());
  EXPECT_EQ(attnkit_c_api_version(), ATTNKIT_C_API_VERSION);
  ASSERT_EQ(attnkit_set_num_threads(3), ATTNKIT_OK);
  EXPECT_EQ(attnkit_num_threads(), 3);
  ASSERT_EQ(attnkit_set_num_threads(0), ATTNKIT_OK);

  const char* name = nullptr;
  ASSERT_EQ(attnkit_set_target("scalar"), ATTNKIT_OK) << attnkit_last_error_message();
  ASSERT_EQ(attnkit_active_target(&name), ATTNKIT_OK);
  EXPECT_STREQ(name, "scalar");
  EXPECT_EQ(attnkit_set_target("avx1024"), ATTNKIT_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(attnkit_last_error_message(), target_names())) << attnkit_last_error_message();
  for (Target target : {Target::avx2, Target::avx512, Target::avx512_bf16}) {
    const attnkit_status status = attnkit_set_target(target_name(target));
    if (missing_cpu_feature(target).empty()) {
      EXPECT_EQ(status, ATTNKIT_OK) << target_name(target);
    } else {  // a CPU without it: the feature is named
      EXPECT_EQ(status, ATTNKIT_UNSUPPORTED) << target_name(target);
      EXPECT_TRUE(contains(attnkit_last_error_message(), missing_cpu_feature(target)));
    }
  }
  ASSERT_EQ(attnkit_set_target(nullptr), ATTNKIT_OK);
  ASSERT_EQ(attnkit_active_target(&name), ATTNKIT_OK);
  EXPECT_STREQ(name, target_name(active_target()));  // the default, or what ATTNKIT_TARGET forces
  EXPECT_EQ(attnkit_active_target(nullptr), ATTNKIT_NULL_POINTER);

  attnkit_tensor t;
  const std::int64_t shape[3] = {2, 3, 4};
  float data[24];
  ASSERT_EQ(attnkit_tensor_contiguous(&t, data, ATTNKIT_F32, 3, shape), ATTNKIT_OK);
  EXPECT_EQ(t.strides[0], 12);
  EXPECT_EQ(t.strides[1], 4);
  EXPECT_EQ(t.strides[2], 1);
  EXPECT_EQ(attnkit_tensor_contiguous(&t, data, ATTNKIT_F32, 5, shape), ATTNKIT_INVALID_SHAPE);
  EXPECT_EQ(attnkit_tensor_contiguous(&t, data, 17, 3, shape), ATTNKIT_INVALID_DTYPE);
  EXPECT_EQ(attnkit_tensor_contiguous(nullptr, data, ATTNKIT_F32, 3, shape), ATTNKIT_NULL_POINTER);
  const std::int64_t huge[2] = {std::int64_t{1} << 40, std::int64_t{1} << 40};
  EXPECT_EQ(attnkit_tensor_contiguous(&t, data, ATTNKIT_F32, 2, huge), ATTNKIT_SIZE_OVERFLOW);
}

}  // namespace
}  // namespace attnkit::testing
